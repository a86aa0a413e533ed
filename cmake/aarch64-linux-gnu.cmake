# Cross build for 64-bit ARM Linux with Debian's cross toolchain, the tests
# run under user-mode QEMU (scripts/test-aarch64):
#   apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
#   dpkg --add-architecture arm64 && apt-get update && apt-get install libcmocka-dev:arm64
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DINFERX_KERNELS_ONLY=ON
# QEMU_CPU picks the emulated core (max: with dotprod; cortex-a53: ARMv8.0).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
# -L: the guest's dynamic loader from libc6-arm64-cross's tree. The guest
# loader also reads the host's /etc/ld.so.cache, which lists the multiarch
# /lib/aarch64-linux-gnu once libc6:arm64 is installed (libcmocka0:arm64
# pulls it in), and a loader with another build's libc.so.6 hangs in
# pthread_create (Debian 12: 2.36-8cross1 against 2.36-9+deb12u14). So the
# guest's LD_LIBRARY_PATH puts the cross tree's own libc first.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu
    -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib)

# Target libraries are Debian multiarch arm64 packages (libcmocka-dev:arm64):
# their .pc files live in the arm64 library directory, and the host's must
# not be seen. CMake finds the libraries themselves there through
# CMAKE_LIBRARY_ARCHITECTURE (aarch64-linux-gnu, taken from the compiler).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
