#!/bin/sh
echo "weft: bazel coverage is not supported by the offline workspace (no coverage tools)" >&2
exit 1
