"""How the C backend finds a package's kernels: a sorted table of their pointer-array entries, compiled into
cffi's wrapper, and one exported lookup ``sg_entry(name)``.

The kernels themselves are not declared to cffi: a declaration makes cffi write (and gcc compile) a Python
wrapper per function, which for a model of a few hundred functions cost as long as the kernels themselves.
Every call goes through an entry's address, by ``direct`` or by cffi's call on a cast function pointer.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The cffi declarations of the lookup.
CDEF = "void *sg_entry(const char *name);"
#: The C type of every pointer-array entry (``symgrad.abi.POINTERS_SUFFIX``).
ENTRY_TYPE = "void (*)(int64_t, void *const *)"


def glue(entries: Sequence[str]) -> str:
    """C for cffi's wrapper: the ``entries`` (sorted names) declared, tabled, and ``sg_entry`` (binary search;
    NULL for an unknown name)."""
    declarations = "".join(f"void {name}(int64_t, void *const *);\n" for name in entries)
    rows = "".join(f'    {{"{name}", {name}}},\n' for name in entries)
    return f"""#include <string.h>
{declarations}
static const struct {{ const char *name; void (*fn)(int64_t, void *const *); }} sg_entries[] = {{
{rows}    {{0, 0}}
}};

void *sg_entry(const char *name)
{{
    size_t lo = 0, hi = {len(entries)};
    while (lo < hi) {{
        const size_t mid = lo + (hi - lo) / 2;
        const int c = strcmp(name, sg_entries[mid].name);
        if (c == 0)
            return (void *)sg_entries[mid].fn;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }}
    return NULL;
}}
"""
