#!/usr/bin/env bash
# clang-format with the project's .clang-format (Debian's clang-format 14, installed when missing).
#   scripts/format.sh              reformat the C++ / Objective-C++ files that differ from HEAD (staged, unstaged, new)
#   scripts/format.sh --all        reformat every tracked C++ / Objective-C++ file
#   scripts/format.sh --check [--all | --since REF]
#                                  report (and exit 1 on) the files that are not formatted: by default every tracked
#                                  file (CI; the tree is kept formatted, so this is also "the files a change
#                                  touches"), with --since REF only the files changed since REF
set -euo pipefail
cd "$(dirname "$0")/.."
mode=fix scope=changed since=""
while (($#)); do
  case "$1" in
    --check) mode=check; [[ "$scope" == changed ]] && scope=all ;;
    --all) scope=all ;;
    --since) scope=since since="${2:?--since needs a git revision}"; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "[format] unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if ! command -v clang-format >/dev/null; then
  sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  echo "[format] installing clang-format" >&2
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends clang-format >/dev/null ||
    { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends clang-format >/dev/null; }
fi

patterns=('*.cpp' '*.h' '*.hpp' '*.cc' '*.mm')
case "$scope" in
  all) mapfile -t files < <(git ls-files -- "${patterns[@]}") ;;
  since) mapfile -t files < <(git diff --name-only --diff-filter=ACMR "$since" -- "${patterns[@]}") ;;
  changed) mapfile -t files < <({ git diff --name-only --diff-filter=ACMR HEAD -- "${patterns[@]}";
                                  git ls-files --others --exclude-standard -- "${patterns[@]}"; } | sort -u) ;;
esac
if ((${#files[@]} == 0)); then
  echo "[format] no C++ files to ${mode}" >&2
  exit 0
fi
if [[ "$mode" == fix ]]; then
  clang-format -i "${files[@]}"
  echo "[format] formatted ${#files[@]} file(s) ($(clang-format --version | sed 's/.*version //'))" >&2
  exit 0
fi
bad=()
# One clang-format process for all files (fast); file by file only to name the ones that differ.
if ! printf '%s\0' "${files[@]}" | xargs -0 -n 200 clang-format --dry-run --Werror >/dev/null 2>&1; then
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
fi
if ((${#bad[@]})); then
  echo "[format] ${#bad[@]} of ${#files[@]} file(s) differ from .clang-format ($(clang-format --version |
    sed 's/.*version //')); run scripts/format.sh (or clang-format -i FILE):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  clang-format --dry-run "${bad[0]}" 2>&1 | head -20 >&2
  exit 1
fi
echo "[format] ${#files[@]} file(s) formatted as .clang-format says" >&2
