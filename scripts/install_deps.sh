#!/usr/bin/env bash
# Installs the Debian packages vlm.cpp builds against, when any is missing. Safe to run repeatedly.
# Also unpacks the sample images of python3-skimage (real photos, a truncated JPEG, PNGs of many colour types) for
# the real-image tests (tests/data/image/test_real_images.cpp; they skip without them): only the package's data folder,
# a 20 MB download, into /usr/local/share/vlm/test-images/skimage; installing the package would pull numpy, scipy
# and matplotlib (86 MB). VLM_NO_TEST_IMAGES=1 skips that step.
set -euo pipefail
packages=(build-essential cmake pkg-config git
          libopenblas-dev libopenblas-openmp-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev
          libtomlplusplus-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev zlib1g-dev python3-pil
          libcurl4-openssl-dev libopenmpi-dev openmpi-bin libpcre2-dev liblzma-dev libcpp-httplib-dev curl
          chromium)  # chromium: the `vlm report` test renders the page headless
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
updated=0

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[deps] all ${#packages[@]} packages present"
else
  echo "[deps] installing: ${missing[*]}"
  $SUDO apt-get update -qq
  updated=1
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node.js and npm: the `vlm serve` test drives the server with the official OpenAI Node client (npm installs it into
# the build folder). Any Node >= 18 will do; Debian's packages only when none is on PATH.
if ! command -v npm >/dev/null 2>&1; then
  echo "[deps] installing nodejs and npm"
  [ "$updated" = 1 ] || { $SUDO apt-get update -qq; updated=1; }
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

images=/usr/local/share/vlm/test-images/skimage
if [ "${VLM_NO_TEST_IMAGES:-0}" != 1 ] && [ ! -f "$images/truncated.jpg" ] &&
   [ ! -f /usr/lib/python3/dist-packages/skimage/data/truncated.jpg ]; then
  echo "[deps] unpacking python3-skimage's sample images into $images"
  [ "$updated" = 1 ] || $SUDO apt-get update -qq
  tmp=$(mktemp -d)
  chmod 755 "$tmp"  # apt's download sandbox user must be able to write there
  if (cd "$tmp" && apt-get download -qq python3-skimage 2>/dev/null) &&
     dpkg-deb -x "$tmp"/python3-skimage_*.deb "$tmp/root"; then
    $SUDO mkdir -p "$images"
    $SUDO cp "$tmp"/root/usr/lib/python3/dist-packages/skimage/data/*.jpg \
             "$tmp"/root/usr/lib/python3/dist-packages/skimage/data/*.png "$images"/
    echo "[deps] $(ls "$images" | wc -l) sample images in $images"
  else
    echo "[deps] warning: could not download python3-skimage; the real-image tests will skip" >&2
  fi
  rm -rf "$tmp"
fi
