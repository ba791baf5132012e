# Compile every public header on its own: one generated translation unit per header, so a header that forgets an
# include fails here. CUDA headers (.cuh, maxtext/cuda.hpp) are checked by the CUDA tests instead (nvcc).
file(GLOB_RECURSE _maxtext_headers RELATIVE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/include/maxtext/*.hpp)
set(_sources "")
foreach(h IN LISTS _maxtext_headers)
  if(h MATCHES "/cuda/" OR h STREQUAL "maxtext/cuda.hpp")
    continue()
  endif()
  if(h STREQUAL "maxtext/testing/catch2.hpp")  # needs Catch2: checked below in a TU that links it
    continue()
  endif()
  string(MAKE_C_IDENTIFIER "${h}" id)
  set(src ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.cpp)
  file(WRITE ${src}.in "#include \"${h}\"\n#include \"${h}\"  // twice: include guards\n")
  configure_file(${src}.in ${src} COPYONLY)
  list(APPEND _sources ${src})
endforeach()
add_library(maxtext_header_check OBJECT ${_sources})
target_link_libraries(maxtext_header_check PRIVATE maxtext maxtext_header_check_flags)
# The check is about compiling (includes, warnings), not about code: no optimisation and no sanitizer instrumentation
# (they only make the ~100 units slower; these objects are never linked).
set(_maxtext_header_check_flags -O0)
if(MAXTEXT_SANITIZE)
  list(APPEND _maxtext_header_check_flags -fno-sanitize=all)
endif()
target_compile_options(maxtext_header_check PRIVATE ${_maxtext_header_check_flags})

# testing/catch2.hpp includes <catch2/catch.hpp>: check it on its own in a TU that links Catch2 (Debian's catch2).
find_package(Catch2 2 QUIET)
if(Catch2_FOUND)
  set(_src ${CMAKE_CURRENT_BINARY_DIR}/header_check/maxtext_testing_catch2_hpp.cpp)
  file(WRITE ${_src}.in "#include \"maxtext/testing/catch2.hpp\"\n#include \"maxtext/testing/catch2.hpp\"  // twice: include guards\n")
  configure_file(${_src}.in ${_src} COPYONLY)
  add_library(maxtext_header_check_catch2 OBJECT ${_src})
  target_link_libraries(maxtext_header_check_catch2 PRIVATE maxtext Catch2::Catch2 maxtext_header_check_flags)
  target_compile_options(maxtext_header_check_catch2 PRIVATE ${_maxtext_header_check_flags})
else()
  message(STATUS "maxtext header check: Catch2 not found, maxtext/testing/catch2.hpp not checked")
endif()
