#!/usr/bin/env bash
# The collection as Galaxy and ansible-test see it (issue 34.6), offline: `ansible-galaxy collection build`
# from the repository root, the tarball unpacked into a temporary ansible_collections/clustercert/cluster
# tree, then `ansible-test sanity` there with this project's Python and the tools scripts/setup.sh installed
# (pyproject's test extras). Run by scripts/test.sh after ansible-lint; about 15 s.
#
# ansible-test runs some sanity tests in virtual environments of its own, which it fills from PyPI after
# downloading a pip bootstrap script: those tests are skipped here, and the ones that can run offline are
# run with the same tool and ansible-test's own settings from this project's environment instead:
#   yamllint          -> ansible-test's own yamllinter.py (its configs, plugin documentation included)
#   pep8              -> pycodestyle with ansible-test's line length and ignore list
#   ansible-doc       -> ansible-doc of every plugin of the collection
#   pylint            -> ruff (this project's linter, pyproject's settings) on plugins/
# Not run: import (the clustercert_profile lookup imports the clustercert tool by design: the roles' lookup
# resolves profiles exactly as the tool does), validate-modules and runtime-metadata (voluptuous, not
# packaged here; the collection has no modules), changelog (no changelogs/).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${VENV:-$REPO/.venv}
PY=$VENV/bin/python
tmp=$(mktemp -d "${TMPDIR:-/tmp}/clustercert-collection.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# nothing of the caller's Ansible settings; ansible-test's cache of venvs and downloads stays in $tmp
export HOME="$tmp/home" ANSIBLE_LOCAL_TEMP="$tmp/ansible-tmp" PATH="$VENV/bin:$PATH" LC_ALL=C.UTF-8
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS
mkdir -p "$HOME"

echo "== ansible-galaxy collection build"
"$VENV/bin/ansible-galaxy" collection build --output-path "$tmp/dist" "$REPO" 2>&1 | grep -v -i cryptography || true
tarball=$(ls "$tmp"/dist/clustercert-cluster-*.tar.gz)
root="$tmp/ansible_collections/clustercert/cluster"
mkdir -p "$root"
tar -xzf "$tarball" -C "$root"
if find "$root" -type l | grep -q .; then
  echo "collection_check: links in the built collection:" >&2; find "$root" -type l >&2; exit 1
fi

echo "== ansible-test sanity (offline: the tests that need no package download)"
cd "$root"
# no git repository here: ansible-test reads the collection's files from the tree
"$VENV/bin/ansible-test" sanity --python "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
  --color no --skip-test ansible-doc --skip-test changelog --skip-test import --skip-test pep8 \
  --skip-test pylint --skip-test runtime-metadata --skip-test validate-modules --skip-test yamllint \
  2>&1 | grep -v 'locale "C.UTF-8"'
SANITY=$("$PY" -c 'import ansible_test, os; print(os.path.join(os.path.dirname(ansible_test.__file__), "_util/controller/sanity"))')

echo "== yamllint (ansible-test's yamllinter)"
out=$(find . \( -name '*.yml' -o -name '*.yaml' -o -path './plugins/*.py' \) -printf '%P\n' | sort | "$PY" "$SANITY/yamllint/yamllinter.py")
if [ -n "$out" ] && [ "$out" != '{"messages": []}' ]; then
  "$PY" - "$out" <<'EOF'
import json, sys
msgs = json.loads(sys.argv[1])["messages"]
for m in msgs:
    print(f"{m['path']}:{m['line']}:{m['column']}: {m['code']}: {m['message']}")
sys.exit(1 if msgs else 0)
EOF
fi

echo "== pep8 (pycodestyle, ansible-test's settings)"
ignore=$(grep -v '^#' "$SANITY/pep8/current-ignore.txt" | grep . | paste -sd, -)
"$VENV/bin/pycodestyle" --max-line-length 160 --ignore "$ignore" plugins

echo "== ruff on plugins/"
(cd "$REPO" && "$VENV/bin/ruff" check --no-cache plugins)

echo "== ansible-doc of every plugin"
export ANSIBLE_COLLECTIONS_PATH="$tmp"
for f in plugins/*/*.py; do
  type=$(basename "$(dirname "$f")")
  if [ "$type" = filter ]; then  # one documented filter per YAML file next to the module
    names=$("$PY" -c 'import ast, sys; t = ast.parse(open(sys.argv[1]).read())
print(" ".join(sorted({c.value for n in ast.walk(t) if isinstance(n, ast.Dict) for c in n.keys
                       if isinstance(c, ast.Constant) and str(c.value).startswith("clustercert_")})))' "$f")
  else
    names=$(basename "$f" .py)
  fi
  for n in $names; do
    "$VENV/bin/ansible-doc" -t "$type" "clustercert.cluster.$n" --json 2>/dev/null \
      | "$PY" -c 'import json, sys; d = json.load(sys.stdin); k = next(iter(d)); assert d[k]["doc"]["short_description"], k' \
      || { echo "collection_check: ansible-doc -t $type clustercert.cluster.$n failed" >&2; exit 1; }
  done
done
echo "collection_check: ok"
