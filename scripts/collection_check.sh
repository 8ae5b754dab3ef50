#!/usr/bin/env bash
# The collection as Galaxy and ansible-test see it (issue 34.6): `ansible-galaxy collection build`
# from the repository root, the tarball unpacked into a temporary ansible_collections/clustercert/cluster
# tree, then `ansible-test sanity` there with this project's Python and the tools scripts/setup.sh installed
# (pyproject's test extras). Run by scripts/test.sh after ansible-lint; about 15 s once its cache is filled.
#
# ansible-test fills some sanity tests' virtual environments from PyPI after a pip bootstrap it would download
# from Ansible's CI host: scripts/ansible_test_get_pip.py stands in for that one download (ensurepip), so every
# sanity test runs, validate-modules, pylint, import and yamllint included. The collection's sanity ignores:
# scripts/ansible-test-ignore.txt (each with its reason), copied into the unpacked tree as ansible-test expects.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${VENV:-$REPO/.venv}
PY=$VENV/bin/python
tmp=$(mktemp -d "${TMPDIR:-/tmp}/clustercert-collection.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# nothing of the caller's Ansible settings; ansible-test's home is in $tmp, its venvs' cache below (ANSIBLE_TEST_CACHE)
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

echo "== ansible-test sanity (every test)"
# Its sanity tests' virtual environments: pip from ensurepip through scripts/ansible_test_get_pip.py (in place of
# the bootstrap script ansible-test downloads from Ansible's CI host, which these machines cannot reach), then their
# pinned tools from PyPI; kept between runs in ANSIBLE_TEST_CACHE (a machine's first run fills it: about 90 s).
cache=${ANSIBLE_TEST_CACHE:-/var/cache/clustercert/ansible-test}
mkdir -p "$cache/cache" "$HOME/.ansible"
ln -s "$cache" "$HOME/.ansible/test"
pipv=$("$PY" -c 'import types; from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="3.11"))["pip"])')
cp "$REPO/scripts/ansible_test_get_pip.py" "$cache/cache/get_pip_${pipv//./_}.py"
# the collection's sanity ignores (ansible-test's own mechanism, checked by its "ignores" test), for this ansible-core
core=$("$PY" -c 'import ansible.release as r; print(".".join(r.__version__.split(".")[:2]))')
mkdir -p "$root/tests/sanity"
cp "$REPO/scripts/ansible-test-ignore.txt" "$root/tests/sanity/ignore-$core.txt"
cd "$root"
# no git repository here: ansible-test reads the collection's files from the tree
rc=0
"$VENV/bin/ansible-test" sanity --python "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
  --color no >"$tmp/sanity.log" 2>&1 || rc=$?
grep -v -e 'locale "C.UTF-8"' -e '^Collecting ' -e '^  Downloading ' -e '━' -e '^Installing collected' \
  -e '^Successfully installed' -e '^Processing ' -e '^Looking in links' -e '^Requirement already' "$tmp/sanity.log" || true
[ "$rc" -eq 0 ] || { echo "collection_check: ansible-test sanity failed (exit $rc)" >&2; exit 1; }

echo "== ansible-doc of every plugin"
export ANSIBLE_COLLECTIONS_PATH="$tmp"
for f in plugins/*/*.py; do
  type=$(basename "$(dirname "$f")")
  case $type in modules|action) type=module ;; esac  # an action plugin is documented as its module
  if [ "$type" = filter ]; then  # one documented filter per YAML file next to the module: every filter it returns
    names=$("$PY" -c 'import ast, sys; t = ast.parse(open(sys.argv[1]).read())
fn = next(n for n in ast.walk(t) if isinstance(n, ast.FunctionDef) and n.name == "filters")
print(" ".join(sorted({c.value for n in ast.walk(fn) if isinstance(n, ast.Dict) for c in n.keys
                       if isinstance(c, ast.Constant)})))' "$f")
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
