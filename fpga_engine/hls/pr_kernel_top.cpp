// pr_kernel_top.cpp — the synthesis entry that Makefile.vitis hands to
// `v++ -c`. The kernel is written once, in pr_kernel.c, in the common subset
// of C and C++; Vitis HLS compiles it through this file as C++ so that
// hls::stream (hls_stream.h) and hls::log1p (hls_math.h) are available under
// __SYNTHESIS__. CMake never builds this file (it globs *.c only).
#include "pr_kernel.c"
