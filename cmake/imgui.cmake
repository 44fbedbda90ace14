# Dear ImGui 1.92 (docking) + ImPlot + the GLFW/OpenGL3 backends and GLFW 3.4, static builds from the pinned
# PyPI wheel that scripts/setup_imgui.sh unpacks into .local/imgui/install (or MOCBENCH_IMGUI_ROOT).
# Defines, when found:
#   mocbench_imgui      INTERFACE target: headers (SYSTEM), libimgui.a, libglfw3.a, OpenGL, dl, pthread
#   MOCBENCH_HAVE_IMGUI ON
# GLFW 3.4 opens the X11 libraries at run time; only OpenGL is linked.
set(MOCBENCH_HAVE_IMGUI OFF)
set(MOCBENCH_IMGUI_ROOT "${CMAKE_CURRENT_LIST_DIR}/../.local/imgui/install" CACHE PATH
    "Directory with include/ and lib/ of the comma-deps-imgui wheel (scripts/setup_imgui.sh)")
get_filename_component(_moc_imgui_root "${MOCBENCH_IMGUI_ROOT}" ABSOLUTE)

if(EXISTS "${_moc_imgui_root}/include/implot.h" AND EXISTS "${_moc_imgui_root}/lib/libimgui.a"
   AND EXISTS "${_moc_imgui_root}/lib/libglfw3.a")
  set(OpenGL_GL_PREFERENCE GLVND)
  find_package(OpenGL QUIET)
  if(OpenGL_FOUND OR TARGET OpenGL::GL)
    add_library(mocbench_imgui INTERFACE)
    target_include_directories(mocbench_imgui SYSTEM INTERFACE "${_moc_imgui_root}/include")
    target_link_libraries(mocbench_imgui INTERFACE
      "${_moc_imgui_root}/lib/libimgui.a" "${_moc_imgui_root}/lib/libglfw3.a" OpenGL::GL ${CMAKE_DL_LIBS}
      Threads::Threads m)
    set(MOCBENCH_HAVE_IMGUI ON)
  endif()
endif()
