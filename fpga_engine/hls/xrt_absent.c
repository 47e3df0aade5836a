/*
 * xrt_absent.c — the "xrt" backend of a build without XRT: it exists so that
 * `engine.backend: xrt` gets an answer a user can act on instead of "unknown
 * backend", and so that `auto` falls back to cpu with that reason. It lives
 * in hls/ because fpga_engine/xrt/ is compiled only when CMake found XRT.
 */
#ifndef PR_HAVE_XRT
#include "pr_backend.h"

static int pr__xrt_absent_new(const pr_pipeline_spec *spec, const pr_engine_opts *opts,
                              pr_backend **out, char *errstr, size_t errstr_size)
{
    (void)spec, (void)opts, (void)out;
    return pr_seterr(errstr, errstr_size, PR_ENODEV,
                     "no Alveo device support: this piperec was built without XRT (install "
                     "libxrt-dev and rebuild); set engine.backend: cpu or auto");
}

const pr_backend_ops pr__backend_xrt = {
    .name = "xrt",
    .new_ = pr__xrt_absent_new,
};
#else
/* Built with XRT: the real backend is fpga_engine/xrt/xrt_backend.c. */
typedef int pr__xrt_absent_unused;
#endif
