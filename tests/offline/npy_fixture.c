/*
 * npy_fixture.c — writes .npy files with sinks/npy.c for the script test
 * test_offline_cli, which checks them with numpy (np.load): a Fortran-order
 * int32 [4, 3] array, a streamed float32 [70000, 2] array (several buffer
 * flushes, header rewritten at close), an int64 [5, 2] and a 1-D int32.
 * usage: npy_fixture DIR
 */
#include <stdio.h>
#include <stdlib.h>

#include "pr_npy.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: npy_fixture DIR\n");
        return 2;
    }
    char path[4096], err[512];
    int rc = 0;
    /* [4, 3] column-major: element (r, c) = 10 * r + c */
    int32_t f[12];
    for (int c = 0; c < 3; c++)
        for (int r = 0; r < 4; r++)
            f[c * 4 + r] = 10 * r + c;
    snprintf(path, sizeof(path), "%s/fortran_i32.npy", argv[1]);
    rc |= pr_npy_write_array(path, PR_NPY_I32, f, 4, 3, true, err, sizeof(err));

    enum { N = 70000, STRIDE = 1024 };
    float blk[2 * STRIDE];
    pr_npy_writer *w;
    snprintf(path, sizeof(path), "%s/stream_f32.npy", argv[1]);
    rc |= pr_npy_open(&w, path, PR_NPY_F32, 2, err, sizeof(err));
    for (uint32_t base = 0; !rc && base < N; base += 1000) {
        for (uint32_t r = 0; r < 1000; r++) {
            blk[r] = (float)(base + r) * 0.5f;
            blk[STRIDE + r] = -(float)(base + r);
        }
        rc |= pr_npy_append_cols(w, blk, STRIDE, 1000, err, sizeof(err));
    }
    rc |= pr_npy_close(w, err, sizeof(err));

    int64_t big[10];
    for (int i = 0; i < 10; i++)
        big[i] = (int64_t)i << 40;
    snprintf(path, sizeof(path), "%s/stream_i64.npy", argv[1]);
    rc |= pr_npy_open(&w, path, PR_NPY_I64, 2, err, sizeof(err));
    rc |= pr_npy_append_cols(w, big, 5, 5, err, sizeof(err));
    rc |= pr_npy_close(w, err, sizeof(err));

    int32_t one[3] = {7, -8, 9};
    snprintf(path, sizeof(path), "%s/vec_i32.npy", argv[1]);
    rc |= pr_npy_write_array(path, PR_NPY_I32, one, 3, 0, false, err, sizeof(err));
    if (rc)
        fprintf(stderr, "npy_fixture: %s\n", err);
    return rc ? 1 : 0;
}
