#!/usr/bin/env bash
# An HTML template for `dvc plots show` that works offline: vega, vega-lite and vega-embed (the versions DVC's own
# template loads from a CDN, one minor release on) fetched once from the npm registry, checked against the pinned
# integrity hashes below, and inlined into the page. `make plots` builds it and renders the pipeline's plots with it.
#   scripts/plots.sh [OUT]   (default: .cache/plots/template.html)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$REPO/.cache/plots/template.html}"
# package@version, its npm integrity (sha512 of the tarball), the bundle inside it
PACKAGES=(
  "vega@5.33.1 sha512-1fArfVDUqVbb5z8n+/nVQb+VNBzx8svY6CrsyTK4Ujm4yrd9I1auoKxBAPXLCavY1LcrbHUskQbGUP8gXOzyQw== build/vega.min.js"
  "vega-lite@5.23.0 sha512-l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6vIN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA== build/vega-lite.min.js"
  "vega-embed@6.29.0 sha512-PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/GSNI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q== build/vega-embed.min.js"
)

die() { echo "scripts/plots.sh: $*" >&2; exit 1; }
command -v npm >/dev/null || die "npm not found (needed once, to fetch vega from the npm registry)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
page="$work/template.html"
{
  printf '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n{refresh_tag}\n<title>agentr1 plots</title>\n'
  for entry in "${PACKAGES[@]}"; do
    read -r spec integrity bundle <<<"$entry"
    name="${spec%@*}"
    version="${spec##*@}"
    (cd "$work" && npm_config_cache="$work/.npm-cache" npm pack "$spec" --silent --loglevel=error >/dev/null) \
      || die "npm pack $spec failed"
    tarball="$work/$name-$version.tgz"
    got="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
    [[ "$got" == "$integrity" ]] || die "$spec: integrity $got, expected $integrity; refusing to use it"
    tar -xzf "$tarball" -C "$work" "package/$bundle"
    printf '<script>/* %s %s */\n' "$spec" "$bundle"
    sed 's#</script#<\\/script#g' "$work/package/$bundle"  # a script body must not close its own tag
    printf '\n</script>\n'
    rm -rf "$work/package"
  done
  printf '<style>body{font:14px system-ui,sans-serif;margin:1.5em}table{border-spacing:15px}</style>\n'
  printf '</head>\n<body>\n{plot_divs}\n</body>\n</html>\n'
} >"$page"
mkdir -p "$(dirname "$OUT")"
mv "$page" "$OUT"
echo "offline plots template: $OUT"
