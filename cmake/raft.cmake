# RAFT (header-only raft::matrix::select_k) from the PyPI wheels that scripts/setup_raft.sh installs
# into .local/rapids/site (or MOCBENCH_RAFT_ROOT: a directory holding libraft/, librmm/, rapids_logger/).
# Include after the CUDA block (needs MOCBENCH_HAVE_CUDA / CUDA::cudart). Defines, when found:
#   mocbench_raft        INTERFACE target: include dirs (the wheel's CCCL 3.5 first, ahead of the
#                        toolkit's 3.0.1, which RAFT 26.10 rejects), RAFT/RMM definitions, the nvcc
#                        flags RAFT needs (extended lambdas, relaxed constexpr; C++20 is set per
#                        source by mocbench_use_raft), and
#                        librmm.so + librapids_logger.so (RMM is no longer header-only)
#   mocbench_raft_libs   INTERFACE target: just those two shared libraries (link side)
#   MOCBENCH_HAVE_RAFT   ON
#   mocbench_use_raft(<target> <source>...)  compiles those .cu sources of <target> as C++20 with
#                        RAFT in an OBJECT library (the rest of <target> keeps C++17 and the toolkit's
#                        CCCL); remove the sources from <target>'s own list first.
set(MOCBENCH_HAVE_RAFT OFF)
set(MOCBENCH_RAFT_ROOT "${CMAKE_CURRENT_LIST_DIR}/../.local/rapids/site" CACHE PATH
    "Directory with the libraft/, librmm/ and rapids_logger/ wheel contents (scripts/setup_raft.sh)")
get_filename_component(_moc_raft_root "${MOCBENCH_RAFT_ROOT}" ABSOLUTE)

if(MOCBENCH_HAVE_CUDA AND EXISTS "${_moc_raft_root}/libraft/include/raft/matrix/select_k.cuh")
  find_library(MOCBENCH_RMM_LIB rmm PATHS "${_moc_raft_root}/librmm/lib64" NO_DEFAULT_PATH)
  find_library(MOCBENCH_RAPIDS_LOGGER_LIB rapids_logger PATHS "${_moc_raft_root}/rapids_logger/lib64"
               NO_DEFAULT_PATH)
  if(MOCBENCH_RMM_LIB AND MOCBENCH_RAPIDS_LOGGER_LIB)
    add_library(mocbench_raft INTERFACE)
    # CCCL: a plain -I (not SYSTEM) so it is searched before nvcc's own include/cccl.
    target_include_directories(mocbench_raft BEFORE INTERFACE "${_moc_raft_root}/libraft/include/rapids")
    target_include_directories(mocbench_raft SYSTEM INTERFACE
      "${_moc_raft_root}/libraft/include"
      "${_moc_raft_root}/librmm/include"
      "${_moc_raft_root}/rapids_logger/include")
    # As the wheel's raft::raft target exports them; MOCBENCH_HAVE_RAFT selects the real raft_topk.cu.
    target_compile_definitions(mocbench_raft INTERFACE
      MOCBENCH_HAVE_RAFT=1
      RAFT_SYSTEM_LITTLE_ENDIAN=1
      RAFT_LOG_ACTIVE_LEVEL=RAPIDS_LOGGER_LOG_LEVEL_WARN)
    # RAFT 26.10 also needs C++20 (std::source_location): mocbench_use_raft sets -std=c++20 per source.
    target_compile_options(mocbench_raft INTERFACE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-extended-lambda --expt-relaxed-constexpr>)
    # Link side only (what the library holding the RAFT objects links): no flags, no include dirs.
    add_library(mocbench_raft_libs INTERFACE)
    target_link_libraries(mocbench_raft_libs INTERFACE
      ${MOCBENCH_RMM_LIB} ${MOCBENCH_RAPIDS_LOGGER_LIB} CUDA::cudart ${CMAKE_DL_LIBS})
    target_link_libraries(mocbench_raft INTERFACE mocbench_raft_libs)
    set(MOCBENCH_HAVE_RAFT ON)
  endif()
endif()
if(MOCBENCH_HAVE_RAFT)
  message(STATUS "mocbench: RAFT ON (${_moc_raft_root})")
elseif(NOT MOCBENCH_HAVE_CUDA)
  message(STATUS "mocbench: RAFT OFF (no CUDA backend: RAFT is a GPU library)")
elseif(NOT EXISTS "${_moc_raft_root}/libraft/include/raft/matrix/select_k.cuh")
  message(STATUS "mocbench: RAFT OFF (not installed in ${_moc_raft_root}: run scripts/setup_raft.sh)")
else()
  message(STATUS "mocbench: RAFT OFF (librmm / librapids_logger missing in ${_moc_raft_root}: run scripts/setup_raft.sh again)")
endif()

function(mocbench_use_raft target)
  if(NOT MOCBENCH_HAVE_RAFT)
    return()
  endif()
  set(objects ${target}_raft)
  add_library(${objects} OBJECT ${ARGN})
  # CMake 3.25 has no CUDA20 flag for nvcc and will not leave its -std=c++17 out (an unset
  # CUDA_STANDARD fails generation with "requires CUDA20"); a source-level option comes after it on
  # the command line, and nvcc takes the last -std (with an "incompatible redefinition" warning).
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS "-std=c++20")
  target_include_directories(${objects} PRIVATE $<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>)
  target_compile_options(${objects} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -lineinfo>)
  target_link_libraries(${objects} PRIVATE mocbench_raft)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:${objects}>)
  target_link_libraries(${target} PRIVATE mocbench_raft_libs)
endfunction()
