# The programs of the GPU bundle (scripts/gpu-bundle), included by the root CMakeLists.txt after
# every other folder. A GPU window receives at most 64 MiB, and eight programs each carrying a
# static copy of the project's code (3 to 4.5 MB stripped each) do not fit the bundle's 32 MB. So
# the bundle's programs are relinked, from the very object files the normal build compiled
# (nothing is compiled twice, no compile flag changes), against one shared library of the
# project's code:
#
#   <build>/bundle/lib/libservelab.so  every object of core, serving (config, cli and the rest),
#                                      policies, traces, sim, kernels and engine, plus cudart,
#                                      linked statically here and nowhere else;
#   <build>/bundle/bin/<program>       sim, engine, kernels_bench, engine_run_test, home_test,
#                                      gpu_dump_logits and every tests/gpu_*_test, each linked
#                                      against libservelab.so (and GoogleTest or Google Benchmark).
#
# The normal programs and tests are untouched: they keep their static libraries, and ctest runs
# them, not these (only the GpuBundle test runs these, through a bundle). The programs carry
# RPATH $ORIGIN/../lib (the root CMakeLists.txt), so bin/ next to lib/ works in the build folder
# and in a bundle copied anywhere; as in the build folder, they find their files from their own
# folder (serving/home.h) and their sibling programs in bin/.
#
# Built only with CUDA and the benchmarks (the bundle needs both), with position-independent code
# (on whenever SERVELAB_BUILD_PYTHON is, the default), and not in the sanitizer or fuzzing builds.
# Part of `all` (the links add a few seconds of CPU time to a build); the target
# `gpu_bundle_programs` builds just them, which scripts/gpu-bundle does before packing
# <build>/bundle. A program's own objects may call the project's code, GoogleTest, Google
# Benchmark and the shared libraries listed below, but no CUDA runtime function directly (the
# runtime's symbols stay inside libservelab.so: such a call fails to link here; go through
# kernels/device.h).
if(NOT SERVELAB_HAVE_CUDA OR NOT SERVELAB_BUILD_BENCH OR SERVELAB_SANITIZE OR SERVELAB_FUZZ)
  return()
endif()
if(NOT CMAKE_POSITION_INDEPENDENT_CODE)
  message(STATUS "ServeLab: no GPU bundle programs: the shared library needs position-independent "
                 "code (configure with SERVELAB_BUILD_PYTHON=ON or CMAKE_POSITION_INDEPENDENT_CODE=ON)")
  return()
endif()

find_package(CUDAToolkit REQUIRED)  # CUDA::cublas below (imported targets are per folder)
set(SERVELAB_BUNDLE_DIR ${PROJECT_BINARY_DIR}/bundle)

# The project's code. servelab_policies_objects is not listed: libservelab.so links
# servelab_engine and servelab_sim below, whose usage requirements carry it as a whole archive
# (policies/CMakeLists.txt), so its objects arrive that way; listed here too they would be
# defined twice. The static archives themselves then add nothing (every object they hold is
# already in), only their external libraries (yaml-cpp, PCRE2, cpp-httplib, cuBLAS, cudart).
# servelab_engine_common is the engine's object library (engine/CMakeLists.txt): servelab_engine's
# own objects are only the CUDA-dependent ones.
set(servelab_bundle_libraries servelab_core servelab_config servelab_cli servelab_traces
    servelab_serving servelab_sim servelab_kernels_host servelab_kernels servelab_engine_common
    servelab_engine)
set(servelab_bundle_objects "")
foreach(library ${servelab_bundle_libraries})
  list(APPEND servelab_bundle_objects $<TARGET_OBJECTS:${library}>)
endforeach()
add_library(servelab_shared SHARED ${servelab_bundle_objects})
target_link_libraries(servelab_shared PRIVATE servelab_engine servelab_sim)
# What the programs' own objects call directly besides the project's code: these shared
# libraries go on their link lines too (the linker does not take symbols from a library's
# dependencies).
target_link_libraries(servelab_shared INTERFACE yaml-cpp PkgConfig::PCRE2 PkgConfig::HTTPLIB
                                                PkgConfig::XXHASH CUDA::cublas)
# CUDA_STANDARD: CMake counts the kernels' objects as CUDA sources and would otherwise ask nvcc
# for the project's C++20, a dialect it does not know for nvcc (nothing is compiled here).
set_target_properties(servelab_shared PROPERTIES
  OUTPUT_NAME servelab LINKER_LANGUAGE CXX CUDA_STANDARD 17
  LIBRARY_OUTPUT_DIRECTORY ${SERVELAB_BUNDLE_DIR}/lib BUILD_RPATH_USE_ORIGIN ON)

add_custom_target(gpu_bundle_programs)
# servelab_bundle_program(NAME [LIBRARY...]): <build>/bundle/bin/NAME from the objects of the
# program NAME, linked against libservelab.so and the LIBRARY arguments.
function(servelab_bundle_program name)
  add_executable(bundle_${name} $<TARGET_OBJECTS:${name}>)
  target_link_libraries(bundle_${name} PRIVATE servelab_shared ${ARGN})
  set_target_properties(bundle_${name} PROPERTIES
    OUTPUT_NAME ${name} LINKER_LANGUAGE CXX
    RUNTIME_OUTPUT_DIRECTORY ${SERVELAB_BUNDLE_DIR}/bin BUILD_RPATH_USE_ORIGIN ON)
  add_dependencies(gpu_bundle_programs bundle_${name})
endfunction()

servelab_bundle_program(sim)
servelab_bundle_program(engine)
servelab_bundle_program(kernels_bench benchmark::benchmark)
servelab_bundle_program(gpu_dump_logits)
# Every GPU test (tests/gpu_*_test.cc, as tests/CMakeLists.txt names them), engine_run_test (its
# CUDA cases) and home_test (the bundle's home resolution).
file(GLOB servelab_bundle_gpu_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/gpu_*_test.cc)
set(servelab_bundle_tests engine_run_test home_test)
foreach(source ${servelab_bundle_gpu_tests})
  get_filename_component(name ${source} NAME_WE)
  list(APPEND servelab_bundle_tests ${name})
endforeach()
foreach(name ${servelab_bundle_tests})
  servelab_bundle_program(${name} GTest::gtest GTest::gtest_main)
endforeach()
