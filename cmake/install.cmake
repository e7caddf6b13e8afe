# The install tree, the CMake package and the Debian package.
#
#   cmake --install build --prefix /opt/gpipe     # or: cpack --config build/CPackConfig.cmake
#   find_package(gpipe CONFIG REQUIRED)           # CMAKE_PREFIX_PATH=/opt/gpipe;<LibTorch>
#   target_link_libraries(app PRIVATE gpipe::runtime)
#   #include <gpipe/gpipe.h>
#
# Headers keep their project paths under include/gpipe (runtime/pipeline.h
# is installed as include/gpipe/runtime/pipeline.h), so the installed
# targets put both include/ and include/gpipe on the consumer's path.
include(CMakePackageConfigHelpers)

set(GPIPE_CXX_STANDARD ${CMAKE_CXX_STANDARD})
# The LibTorch line the libraries were built against: its C++ ABI is theirs.
string(REGEX MATCH "^[0-9]+\\.[0-9]+" GPIPE_TORCH_MIN "${Torch_VERSION}")
string(REGEX REPLACE "^([0-9]+)\\.([0-9]+).*" "\\2" GPIPE_TORCH_MINOR "${Torch_VERSION}")
string(REGEX REPLACE "^([0-9]+)\\..*" "\\1" GPIPE_TORCH_MAJOR "${Torch_VERSION}")
math(EXPR GPIPE_TORCH_NEXT_MINOR "${GPIPE_TORCH_MINOR} + 1")
set(GPIPE_TORCH_NEXT "${GPIPE_TORCH_MAJOR}.${GPIPE_TORCH_NEXT_MINOR}")

configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in ${PROJECT_BINARY_DIR}/include/gpipe/version.h @ONLY)

foreach(library IN ITEMS passes runtime compiler)
  target_include_directories(gpipe_${library} INTERFACE
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/gpipe>)
  target_compile_features(gpipe_${library} PUBLIC cxx_std_${GPIPE_CXX_STANDARD})
  set_target_properties(gpipe_${library} PROPERTIES EXPORT_NAME ${library})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${library}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gpipe/${library} FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/gpipe/gpipe.h ${PROJECT_BINARY_DIR}/include/gpipe/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gpipe)
install(TARGETS gpipe_passes gpipe_runtime gpipe_compiler EXPORT gpipeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# `cmake --install --strip` and CPack (CPACK_STRIP_FILES) strip programs but
# not static libraries; their debug info is most of their size.
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    foreach(library IN ITEMS passes runtime compiler)
      execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
        \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libgpipe_\${library}.a\")
    endforeach()
  endif()")
install(TARGETS gpipe-compile gpipe-run gpipe-inspect gpipe-launch gpipe-export
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(GPIPE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpipe)
install(EXPORT gpipeTargets NAMESPACE gpipe:: DESTINATION ${GPIPE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gpipeConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/gpipeConfig.cmake
                              INSTALL_DESTINATION ${GPIPE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gpipeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gpipeConfig.cmake ${PROJECT_BINARY_DIR}/gpipeConfigVersion.cmake
        DESTINATION ${GPIPE_CMAKE_DIR})

# cpack --config build/CPackConfig.cmake: a .deb for Debian 12 next to
# Debian's libtorch-dev (build against it: the default build/).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gpipe-cpp)
set(CPACK_PACKAGE_VENDOR "gpipe-cpp")
set(CPACK_PACKAGE_CONTACT "gpipe-cpp developers <gpipe-cpp@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPipe pipeline parallelism as a TorchScript compiler and C++ runtime")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Strips the programs (install --strip leaves static libraries alone); a
# Release build (-DCMAKE_BUILD_TYPE=Release) also leaves the debug info out
# of the libraries.
set(CPACK_STRIP_FILES TRUE)
# The libraries are static: the package's users compile against these.
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libtorch-dev (>= ${GPIPE_TORCH_MIN}), libtorch-dev (<< ${GPIPE_TORCH_NEXT}), libboost-filesystem-dev (>= 1.74), libboost-program-options1.74.0, nlohmann-json3-dev (>= 3)")
include(CPack)
