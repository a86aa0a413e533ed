# libinferx: the module archives' objects as one static archive
# (libinferx.a) and one shared object (libinferx.so.MAJOR, with a SONAME),
# installed with the public headers, the inferx binary, a pkg-config file and
# a CMake package config. The tree's own programs keep linking the module
# archives (a wrong-way include still fails to link there); users link one
# library.
#
#   cmake --install build --prefix /usr/local
#   cc app.c $(pkg-config --cflags --libs inferx)
#   find_package(inferx REQUIRED) + target_link_libraries(app PRIVATE inferx::inferx)

set(IX_LIB_MODULES ix_core ix_gguf ix_kernels ix_tokenizer ix_grammar ix_template ix_kv ix_sample ix_model ix_spec
  ix_sched ix_engine ix_server ix_medusa ix_kvstore)
set(IX_LIB_OBJECTS "")
foreach(m IN LISTS IX_LIB_MODULES)
  list(APPEND IX_LIB_OBJECTS $<TARGET_OBJECTS:${m}>)
endforeach()

# Third-party libraries the modules use, by plain name: what a program that
# links the static archive links beside it (their shared objects are enough;
# inferx.pc's Libs.private, the package config's static target).
set(IX_LIB_DEPS jansson microhttpd curl xxhash utf8proc m)

add_library(inferx_static STATIC ${IX_LIB_OBJECTS})
set_target_properties(inferx_static PROPERTIES OUTPUT_NAME inferx)
target_include_directories(inferx_static INTERFACE
  $<BUILD_INTERFACE:${INFERX_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(inferx_static INTERFACE ${IX_LIB_DEPS} Threads::Threads)

add_library(inferx_shared SHARED ${IX_LIB_OBJECTS})
set_target_properties(inferx_shared PROPERTIES
  OUTPUT_NAME inferx
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
target_include_directories(inferx_shared INTERFACE
  $<BUILD_INTERFACE:${INFERX_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
pkg_check_modules(IX_LIB_PC REQUIRED IMPORTED_TARGET jansson libmicrohttpd libcurl libxxhash libutf8proc)
target_link_libraries(inferx_shared PRIVATE PkgConfig::IX_LIB_PC m Threads::Threads)
# Only the public API leaves the shared object: ix_name, never the ix__name
# internals the modules share among themselves.
target_link_options(inferx_shared PRIVATE "-Wl,--version-script=${INFERX_SOURCE_DIR}/cmake/inferx.map")
set_property(TARGET inferx_shared APPEND PROPERTY LINK_DEPENDS ${INFERX_SOURCE_DIR}/cmake/inferx.map)
if(NOT INFERX_SANITIZE AND NOT INFERX_TSAN)
  # every symbol resolved at link time (the sanitizers' runtimes come from
  # the executable, so not there)
  target_link_options(inferx_shared PRIVATE "-Wl,--no-undefined")
endif()
add_library(inferx::inferx ALIAS inferx_shared)
add_library(inferx::inferx_static ALIAS inferx_static)

# ---- install ----------------------------------------------------------------
install(TARGETS inferx RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS inferx_static inferx_shared
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# dist.h stays out: ix_dist (MPI) is not in libinferx, so that a program
# linking the library needs no MPI; the inferx binary carries it.
install(DIRECTORY ${INFERX_SOURCE_DIR}/include/inferx DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "dist.h" EXCLUDE)
install(FILES ${INFERX_SOURCE_DIR}/models/target-f16.gguf DESTINATION ${CMAKE_INSTALL_DATADIR}/inferx/models)

set(IX_LIB_DEPS_CMAKE "${IX_LIB_DEPS}")
list(JOIN IX_LIB_DEPS " -l" IX_LIB_DEPS_FLAGS)
set(IX_LIB_DEPS_FLAGS "-l${IX_LIB_DEPS_FLAGS}")
# relocatable: the prefix relative to the .pc file's own folder
file(RELATIVE_PATH IX_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${INFERX_SOURCE_DIR}/cmake/inferx.pc.in ${CMAKE_BINARY_DIR}/inferx.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/inferx.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

include(CMakePackageConfigHelpers)
configure_package_config_file(${INFERX_SOURCE_DIR}/cmake/inferxConfig.cmake.in
  ${CMAKE_BINARY_DIR}/inferxConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/inferx
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/inferxConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/inferxConfig.cmake ${CMAKE_BINARY_DIR}/inferxConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/inferx)
