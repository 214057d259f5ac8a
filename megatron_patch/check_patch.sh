#!/bin/sh
# Check that the tracehouse patch still applies to a Megatron-LM checkout.
# Usage: megatron_patch/check_patch.sh /path/to/Megatron-LM [PATCH]
# Exit 0: it applies cleanly (nothing is changed); non-zero: git's reason.
set -eu
checkout=${1:?usage: check_patch.sh MEGATRON_LM_CHECKOUT [PATCH]}
here=$(cd "$(dirname "$0")" && pwd)
patch=${2:-$here/megatron-lm-core_v0.16.1.patch}
git -C "$checkout" apply --check --verbose "$patch"
echo "ok: $(basename "$patch") applies to $checkout ($(git -C "$checkout" describe --tags --always 2>/dev/null || echo unknown))"
