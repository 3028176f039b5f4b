# `cmake --install`: the headers, the shared library (with its SONAME link), a CMake package
# (find_package(fp4cl CONFIG) -> fp4cl::fp4cl) and a pkg-config file (fp4cl.pc). The static
# library and the tools stay in the build tree.
include(CMakePackageConfigHelpers)

set(FP4CL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fp4cl)
set(FP4CL_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/fp4cl DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(TARGETS fp4cl_shared EXPORT fp4cl-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT fp4cl-targets NAMESPACE fp4cl:: DESTINATION ${FP4CL_CMAKE_DIR})

configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/fp4cl-config.cmake.in
  ${CMAKE_BINARY_DIR}/generated/fp4cl-config.cmake INSTALL_DESTINATION ${FP4CL_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/generated/fp4cl-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/generated/fp4cl-config.cmake
              ${CMAKE_BINARY_DIR}/generated/fp4cl-config-version.cmake
        DESTINATION ${FP4CL_CMAKE_DIR})

# The .pc file finds its prefix relative to itself, so an installed tree can be moved.
file(RELATIVE_PATH FP4CL_PC_PREFIX_FROM_PCDIR /root/${FP4CL_PKGCONFIG_DIR} /root)
configure_file(${CMAKE_SOURCE_DIR}/cmake/fp4cl.pc.in ${CMAKE_BINARY_DIR}/generated/fp4cl.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/generated/fp4cl.pc DESTINATION ${FP4CL_PKGCONFIG_DIR})

# The Python binding (pure ctypes, python/fp4cl): PYTHONPATH=<prefix>/<libdir>/python3/site-packages;
# it finds the libfp4cl.so installed beside it by itself (README "Python").
install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/fp4cl DESTINATION ${CMAKE_INSTALL_LIBDIR}/python3/site-packages
        PATTERN __pycache__ EXCLUDE)
