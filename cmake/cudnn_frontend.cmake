# cuDNN's fused SDPA through the cuDNN frontend (header-only C++ graph API) from the PyPI wheel that
# scripts/setup_cudnn_frontend.sh unpacks into .local/cudnn_frontend/include (or MOCBENCH_CUDNN_FRONTEND_INCLUDE),
# with the toolkit's cudnn.h and libcudnn.so (linked dynamically: libcudnn.so.9 on the GPU machine).
# Include after the CUDA block (needs MOCBENCH_HAVE_CUDA / CUDAToolkit). Defines, when all are found:
#   mocbench_cudnn_frontend  INTERFACE target: the frontend and cuDNN include directories (SYSTEM: their
#                            warnings are not ours), MOCBENCH_HAVE_CUDNN_SDPA=1, libcudnn and libnvrtc
#   MOCBENCH_HAVE_CUDNN_SDPA ON
#   mocbench_use_cudnn_frontend(<target> <source>)  compiles <source> of <target> with it; without it
#                            <source> is compiled plainly (kernels/cuda/cudnn_sdpa.cpp then answers "not here").
set(MOCBENCH_HAVE_CUDNN_SDPA OFF)
set(MOCBENCH_CUDNN_FRONTEND_INCLUDE "${CMAKE_CURRENT_LIST_DIR}/../.local/cudnn_frontend/include" CACHE PATH
    "Directory with cudnn_frontend.h (scripts/setup_cudnn_frontend.sh)")
get_filename_component(_moc_cudnn_fe_include "${MOCBENCH_CUDNN_FRONTEND_INCLUDE}" ABSOLUTE)

if(MOCBENCH_HAVE_CUDA AND EXISTS "${_moc_cudnn_fe_include}/cudnn_frontend.h")
  find_path(MOCBENCH_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(MOCBENCH_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(MOCBENCH_CUDNN_INCLUDE AND MOCBENCH_CUDNN_LIB)
    add_library(mocbench_cudnn_frontend INTERFACE)
    target_include_directories(mocbench_cudnn_frontend SYSTEM INTERFACE
      "${_moc_cudnn_fe_include}" "${MOCBENCH_CUDNN_INCLUDE}")
    # No JSON (de)serialization of graphs: not used here, and it is a third of the compile time.
    target_compile_definitions(mocbench_cudnn_frontend INTERFACE MOCBENCH_HAVE_CUDNN_SDPA=1 CUDNN_FRONTEND_SKIP_JSON_LIB)
    # NVRTC: the frontend's own engines (compiled at run time) are part of the graph code we instantiate.
    target_link_libraries(mocbench_cudnn_frontend INTERFACE ${MOCBENCH_CUDNN_LIB} CUDA::nvrtc CUDA::cudart)
    set(MOCBENCH_HAVE_CUDNN_SDPA ON)
  endif()
endif()
if(MOCBENCH_HAVE_CUDNN_SDPA)
  message(STATUS "mocbench: cuDNN SDPA ON (${_moc_cudnn_fe_include}, ${MOCBENCH_CUDNN_LIB})")
elseif(NOT MOCBENCH_HAVE_CUDA)
  message(STATUS "mocbench: cuDNN SDPA OFF (no CUDA backend)")
else()
  message(STATUS "mocbench: cuDNN SDPA OFF (run scripts/setup_cudnn_frontend.sh; needs the CUDA toolkit's cuDNN)")
endif()

function(mocbench_use_cudnn_frontend target source)
  target_sources(${target} PRIVATE ${source})
  set_source_files_properties(${source} PROPERTIES COMPILE_OPTIONS "${MOCBENCH_WARNINGS}")
  if(MOCBENCH_HAVE_CUDNN_SDPA)
    target_link_libraries(${target} PRIVATE mocbench_cudnn_frontend)
  endif()
endfunction()
