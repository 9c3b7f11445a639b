# Third-party dependencies, all from Debian packages (scripts/install_deps.sh installs them).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(PkgConfig REQUIRED)

# OpenBLAS: the CPU GEMM. Prefer Debian's OpenMP build (libopenblas-openmp-dev) so GEMMs and our OpenMP ops share
# one thread pool instead of two pools fighting for the same cores; the build RPATH pins that variant at run time.
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread x86_64-linux-gnu)
find_library(OPENBLAS_LIBRARY NAMES openblas)
message(STATUS "OpenBLAS: ${OPENBLAS_LIBRARY}")
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found: run scripts/install_deps.sh (apt-get install libopenblas-dev)")
endif()
add_library(vlm_openblas INTERFACE)
target_include_directories(vlm_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(vlm_openblas INTERFACE ${OPENBLAS_LIBRARY})

pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)
pkg_check_modules(LIBPNG REQUIRED IMPORTED_TARGET libpng)
pkg_check_modules(LIBWEBP REQUIRED IMPORTED_TARGET libwebp)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)
# cpp-httplib (Debian's compiled build, with its OpenSSL/zlib/Brotli defines): the HTTP server of `vlm serve`.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_package(nlohmann_json 3 REQUIRED)

if(VLM_TESTS)
  find_package(GTest REQUIRED)
endif()

if(VLM_CUDA)
  # Hopper only by default: sm_90a unlocks wgmma/TMA. Override with -DVLM_CUDA_GENCODE=...
  set(VLM_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a" CACHE STRING "nvcc -gencode flags")
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  # CMake 3.25 (Debian 12) cannot express CUDA_STANDARD 20; CUDA sources are C++17.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  string(APPEND CMAKE_CUDA_FLAGS " ${VLM_CUDA_GENCODE} --expt-relaxed-constexpr -lineinfo")
  add_compile_definitions(VLM_HAVE_CUDA=1)
endif()
