/*
 * xrt_backend.c — the "xrt" backend: the preprocessing kernel on an Alveo
 * card (U55C, built with fpga_engine/hls/Makefile.vitis) through XRT's C API.
 * Compiled only when CMake found XRT (PR_HAVE_XRT); otherwise
 * hls/xrt_absent.c stands in and says so.
 *
 * All host logic is pr_khost.c, shared with hls-sim, so the device sees the
 * same words the C simulation was tested with. This file is the transport:
 *   - one buffer object per kernel buffer, in the HBM bank the kernel argument
 *     is connected to (xrtKernelArgGroupId; banks in hls/u55c.cfg), one table
 *     buffer per vocabulary lane on that lane's pseudo-channel; input,
 *     output and new-index log are double buffered so pr__khost can send call
 *     i+1 and read call i back while the card runs;
 *   - the vocabulary tables are a device-only buffer: they never cross PCIe
 *     except through the kernel's READ/LOAD modes (snapshots, recovery);
 *   - a kernel start is xrtRunOpen + xrtRunSetArg per argument (the lane
 *     count is a compile-time constant, so no fixed variadic call) +
 *     xrtRunStart; a wait is xrtRunWait.
 *
 * Safety: XRT 2.13's xrtDeviceOpen throws (and so aborts a C program) when
 * there is no device, so create first asks xclProbe(), which only counts,
 * and fails with PR_ENODEV and a reason naming the fallback.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xrt.h>
#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>

#include "../hls/pr_khost.h"
#include "engine_int.h"
#include "pr_log.h"

#define PR__KERNEL_NAME "pr_kernel"

struct pr_backend {
    /* first: the shared ops (PR__KHOST_OPS) treat a pr_backend as its pr__khost */
    pr__khost h;
    xrtDeviceHandle dev;
    xrtKernelHandle krnl;
    xrtBufferHandle bo[PR_KBUF__N];
    xrtRunHandle run[2];
};

static int pr__xrt_sync(pr__khost *h, int buf, size_t off, size_t len, enum xclBOSyncDirection dir)
{
    pr_backend *be = h->xp_ctx;
    if (!len)
        return 0;
    return xrtBOSync(be->bo[buf], dir, len, off) ? PR_EIO : 0;
}

static int pr__xrt_to_dev(pr__khost *h, int buf, size_t off, size_t len)
{
    return pr__xrt_sync(h, buf, off, len, XCL_BO_SYNC_BO_TO_DEVICE);
}

static int pr__xrt_from_dev(pr__khost *h, int buf, size_t off, size_t len)
{
    return pr__xrt_sync(h, buf, off, len, XCL_BO_SYNC_BO_FROM_DEVICE);
}

static int pr__xrt_start(pr__khost *h, int slot, uint32_t mode, uint32_t rows, uint32_t col,
                         uint32_t first, uint32_t count)
{
    pr_backend *be = h->xp_ctx;
    xrtRunHandle r = xrtRunOpen(be->krnl);
    if (!r)
        return PR_EIO;
    int bad = xrtRunSetArg(r, PR_KARG_IN, be->bo[PR_KBUF_IN0 + slot]) ||
              xrtRunSetArg(r, PR_KARG_OUT, be->bo[PR_KBUF_OUT0 + slot]) ||
              xrtRunSetArg(r, PR_KARG_CFG, be->bo[PR_KBUF_CFG]) ||
              xrtRunSetArg(r, PR_KARG_NEWV, be->bo[PR_KBUF_NEWV0 + slot]) ||
              xrtRunSetArg(r, PR_KARG_XFER, be->bo[PR_KBUF_XFER]) ||
              xrtRunSetArg(r, PR_KARG_MODE, mode) || xrtRunSetArg(r, PR_KARG_ROWS, rows) ||
              xrtRunSetArg(r, PR_KARG_COL, col) || xrtRunSetArg(r, PR_KARG_FIRST, first) ||
              xrtRunSetArg(r, PR_KARG_COUNT, count);
    for (int l = 0; !bad && l < PR_K_VOCAB_LANES; l++)
        bad = xrtRunSetArg(r, PR_KARG_TAB0 + l, be->bo[PR_KBUF_TAB0 + l]);
    if (bad || xrtRunStart(r)) {
        xrtRunClose(r);
        return PR_EIO;
    }
    be->run[slot] = r;
    return 0;
}

static int pr__xrt_wait(pr__khost *h, int slot)
{
    pr_backend *be = h->xp_ctx;
    if (!be->run[slot])
        return 0;
    enum ert_cmd_state st = xrtRunWait(be->run[slot]);
    xrtRunClose(be->run[slot]);
    be->run[slot] = NULL;
    return st == ERT_CMD_STATE_COMPLETED ? 0 : PR_EIO;
}

static const pr_kxport_ops pr__xrt_xport = {
    .to_dev = pr__xrt_to_dev,
    .from_dev = pr__xrt_from_dev,
    .start = pr__xrt_start,
    .wait = pr__xrt_wait,
};

static void pr__xrt_free(pr_backend *be)
{
    if (!be)
        return;
    for (int s = 0; s < 2; s++)
        pr__xrt_wait(&be->h, s);
    pr__khost_fini(&be->h);
    for (int i = 0; i < PR_KBUF__N; i++)
        if (be->bo[i])
            xrtBOFree(be->bo[i]);
    if (be->krnl)
        xrtKernelClose(be->krnl);
    if (be->dev)
        xrtDeviceClose(be->dev);
    free(be);
}

static int pr__buf_arg(int buf)
{
    switch (buf) {
    case PR_KBUF_IN0:
    case PR_KBUF_IN1:
        return PR_KARG_IN;
    case PR_KBUF_OUT0:
    case PR_KBUF_OUT1:
        return PR_KARG_OUT;
    case PR_KBUF_NEWV0:
    case PR_KBUF_NEWV1:
        return PR_KARG_NEWV;
    case PR_KBUF_CFG:
        return PR_KARG_CFG;
    case PR_KBUF_XFER:
        return PR_KARG_XFER;
    default:
        return PR_KARG_TAB0 + (buf - PR_KBUF_TAB0); /* lane tables */
    }
}

static int pr__xrt_new(const pr_pipeline_spec *spec, const pr_engine_opts *opts, pr_backend **out,
                       char *errstr, size_t errstr_size)
{
    int index = opts && opts->device > 0 ? opts->device : 0;
    unsigned n = xclProbe();
    if (n == 0)
        return pr_seterr(
            errstr, errstr_size, PR_ENODEV,
            "no Alveo device found (xclProbe found 0); set engine.backend: cpu or auto");
    if ((unsigned)index >= n)
        return pr_seterr(errstr, errstr_size, PR_ENODEV,
                         "engine.device: Alveo device %d not present (xclProbe found %u); set "
                         "engine.device below %u, or engine.backend: cpu or auto",
                         index, n, n);
    if (!getenv("XILINX_XRT"))
        return pr_seterr(errstr, errstr_size, PR_ENODEV,
                         "XILINX_XRT is not set (XRT cannot open the device without it); source "
                         "/opt/xilinx/xrt/setup.sh, or set engine.backend: cpu or auto");
    if (!opts || !opts->xclbin || !opts->xclbin[0])
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "engine.xclbin: the xrt backend needs the device binary (build it with "
                         "fpga_engine/hls/Makefile.vitis)");
    if (access(opts->xclbin, R_OK) != 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "engine.xclbin: cannot read %s",
                         opts->xclbin);

    pr_backend *be = calloc(1, sizeof(*be));
    if (!be)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "xrt: out of memory");
    int rc = pr__khost_plan(&be->h, spec, errstr, errstr_size);
    if (rc) {
        free(be);
        return rc;
    }
    be->h.xp = &pr__xrt_xport;
    be->h.xp_ctx = be;

    xuid_t uuid;
    if (!(be->dev = xrtDeviceOpen((unsigned)index))) {
        rc = pr_seterr(errstr, errstr_size, PR_ENODEV, "xrt: cannot open Alveo device %d", index);
        goto fail;
    }
    if (xrtDeviceLoadXclbinFile(be->dev, opts->xclbin) || xrtDeviceGetXclbinUUID(be->dev, uuid)) {
        rc = pr_seterr(errstr, errstr_size, PR_EIO,
                       "xrt: loading %s onto device %d failed (built for another shell than "
                       "xilinx_u55c_gen3x16_xdma_3_202210_1?)",
                       opts->xclbin, index);
        goto fail;
    }
    if (!(be->krnl = xrtPLKernelOpen(be->dev, uuid, PR__KERNEL_NAME))) {
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "xrt: %s has no kernel '%s'", opts->xclbin,
                       PR__KERNEL_NAME);
        goto fail;
    }
    for (int i = 0; i < PR_KBUF__N; i++) {
        int grp = xrtKernelArgGroupId(be->krnl, pr__buf_arg(i));
        int is_tab = i >= PR_KBUF_TAB0;
        xrtBufferFlags fl = is_tab ? XRT_BO_FLAGS_DEV_ONLY : XRT_BO_FLAGS_NONE;
        if (grp < 0 || !(be->bo[i] = xrtBOAlloc(be->dev, be->h.size[i], fl, (xrtMemoryGroup)grp))) {
            rc = pr_seterr(errstr, errstr_size, PR_ENOMEM,
                           "xrt: cannot allocate %zu bytes of device memory for kernel argument %d",
                           be->h.size[i], pr__buf_arg(i));
            goto fail;
        }
        if (!is_tab && !(be->h.buf[i] = xrtBOMap(be->bo[i]))) {
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "xrt: cannot map a device buffer");
            goto fail;
        }
        if (be->h.buf[i])
            memset(be->h.buf[i], 0, be->h.size[i]);
    }
    /* Device memory holds anything: clear every vocabulary table. */
    if ((rc = pr__khost_start(&be->h, 1, errstr, errstr_size)))
        goto fail;
    pr_info("engine: xrt backend on Alveo device %d, %s", index, opts->xclbin);
    *out = be;
    return 0;
fail:
    pr__xrt_free(be);
    return rc;
}

const pr_backend_ops pr__backend_xrt = {
    .name = "xrt",
    .new_ = pr__xrt_new,
    .free_ = pr__xrt_free,
    PR__KHOST_OPS,
};
