/*
 * pr_grow.h — the one growable-array step: make room for `need` elements,
 * doubling the capacity (from a small minimum) so n appends cost O(n).
 *
 *     if (pr_grow((void **)&v, &cap, n + 1, sizeof(*v)) < 0)
 *         return PR_ENOMEM;
 *     v[n++] = x;
 *
 * On failure the array and its capacity are unchanged.
 */
#ifndef PR_GROW_H
#define PR_GROW_H

#include <stdlib.h>

#include "pr_error.h"

#define PR_GROW_MIN 16

static inline int pr_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : PR_GROW_MIN;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np)
        return PR_ENOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

#endif
