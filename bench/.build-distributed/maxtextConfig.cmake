
####### Expanded from @PACKAGE_INIT@ by configure_package_config_file() #######
####### Any changes to this file will be overwritten by the next CMake run ####
####### The input file was maxtextConfig.cmake.in                            ########

get_filename_component(PACKAGE_PREFIX_DIR "${CMAKE_CURRENT_LIST_DIR}/../../../" ABSOLUTE)

macro(set_and_check _var _file)
  set(${_var} "${_file}")
  if(NOT EXISTS "${_file}")
    message(FATAL_ERROR "File or directory ${_file} referenced by variable ${_var} does not exist !")
  endif()
endmacro()

macro(check_required_components _NAME)
  foreach(comp ${${_NAME}_FIND_COMPONENTS})
    if(NOT ${_NAME}_${comp}_FOUND)
      if(${_NAME}_FIND_REQUIRED_${comp})
        set(${_NAME}_FOUND FALSE)
      endif()
    endif()
  endforeach()
endmacro()

####################################################################################

include(CMakeFindDependencyMacro)
find_dependency(Eigen3 3.4 NO_MODULE)
find_dependency(xtl)
find_dependency(xsimd)
find_dependency(nlohmann_json 3)
find_dependency(yaml-cpp)
find_dependency(Threads)
find_dependency(OpenMP COMPONENTS CXX)
find_dependency(ZLIB)
find_dependency(PkgConfig)
pkg_check_modules(MAXTEXT_ONIG REQUIRED IMPORTED_TARGET oniguruma)
pkg_check_modules(MAXTEXT_UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
if("cuda" IN_LIST maxtext_FIND_COMPONENTS)
  find_dependency(CUDAToolkit)
endif()
if(TRUE)
  find_dependency(PNG)
  find_dependency(JPEG)
endif()

include("${CMAKE_CURRENT_LIST_DIR}/maxtextTargets.cmake")
set(maxtext_CONFIG_DIR "${PACKAGE_PREFIX_DIR}/share/maxtext/configs")

if("cuda" IN_LIST maxtext_FIND_COMPONENTS AND NOT TARGET maxtext::cuda)
  set(maxtext_FOUND FALSE)
  set(maxtext_NOT_FOUND_MESSAGE "maxtext was installed without the cuda component (no CUDA toolkit at build time)")
endif()
if("image" IN_LIST maxtext_FIND_COMPONENTS AND NOT TARGET maxtext::image)
  set(maxtext_FOUND FALSE)
  set(maxtext_NOT_FOUND_MESSAGE "maxtext was installed without the image component (no libpng / libjpeg at build time)")
endif()
check_required_components(maxtext)
