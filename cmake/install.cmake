# What `cmake --install` puts under the prefix besides the remat command
# (app/CMakeLists.txt): the headers, libremat, a CMake package
# (find_package(remat) gives the target remat::remat) and a pkg-config file
# (remat.pc). tests/install.sh builds examples/ against both.
include(CMakePackageConfigHelpers)

install(FILES ${PROJECT_SOURCE_DIR}/include/remat.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/remat ${PROJECT_BINARY_DIR}/include/remat
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS remat EXPORT remat-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The CMake package. A static libremat names its dependencies by the targets
# remat's build uses (OpenMP::OpenMP_C, MPI::MPI_C, PkgConfig::CJSON, PCRE2 and
# remat_openblas, the OpenMP OpenBLAS by path, and remat_dnnl, oneDNN by path);
# rematConfig.cmake finds or defines them before the exported target.
set(REMAT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/remat)
install(EXPORT remat-targets NAMESPACE remat:: FILE rematTargets.cmake
        DESTINATION ${REMAT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rematConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/rematConfig.cmake
                              INSTALL_DESTINATION ${REMAT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/rematConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/rematConfig.cmake ${PROJECT_BINARY_DIR}/rematConfigVersion.cmake
        DESTINATION ${REMAT_CMAKE_DIR})

# The pkg-config file. With a shared libremat `--libs` is -lremat (the
# dependencies are under Libs.private, for --static); with a static one the
# dependencies are part of Libs, since nothing else would bring them in. The
# OpenMP OpenBLAS is named by its directory, which also goes into the
# program's RUNPATH (see the top CMakeLists.txt for why).
set(deps "-L${REMAT_OPENBLAS_LIBDIR} -Wl,-rpath,${REMAT_OPENBLAS_LIBDIR} -lopenblas")
get_filename_component(REMAT_DNNL_LIBDIR "${REMAT_DNNL_LIB}" DIRECTORY)
string(APPEND deps " -L${REMAT_DNNL_LIBDIR} -ldnnl")
string(APPEND deps " ${OpenMP_C_FLAGS}")
foreach(lib ${MPI_C_LIBRARIES})
  string(APPEND deps " ${lib}")
endforeach()
if(REMAT_HAVE_CUDA) # the CUDA backend's runtime and cuBLASLt
  string(APPEND deps " -L${CUDAToolkit_LIBRARY_DIR} -lcublasLt -lcudart -lstdc++")
endif()
string(APPEND deps " -lm")
if(BUILD_SHARED_LIBS)
  set(REMAT_PC_LIBS "")
  set(REMAT_PC_LIBS_PRIVATE "${deps}")
  set(REMAT_PC_REQUIRES "")
  set(REMAT_PC_REQUIRES_PRIVATE "libcjson libpcre2-8")
else()
  set(REMAT_PC_LIBS " ${deps}")
  set(REMAT_PC_LIBS_PRIVATE "")
  set(REMAT_PC_REQUIRES "libcjson libpcre2-8")
  set(REMAT_PC_REQUIRES_PRIVATE "")
endif()
# The prefix is found from the file's own place (${pcfiledir}), so an
# install with `cmake --install build --prefix DIR` is right wherever DIR is.
file(RELATIVE_PATH REMAT_PC_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" REMAT_PC_PREFIX "${REMAT_PC_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/remat.pc.in ${PROJECT_BINARY_DIR}/remat.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/remat.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
