# The layers of server/ (docs/architecture.md), lowest first. Each folder is a library
# that may include its own headers and those of the folders it USES, nothing else; the
# process (server/server.*, server/main.cpp) sits on top and may use them all. protocol/,
# config/ and routing/ are below server/ and include nothing of it.
#
# Checked on every build (the `layers` target of CMakeLists.txt) and by
# tests/integration/test_layers.sh: `cmake -DSP_ROOT=<tree> -P cmake/layers.cmake`.
if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.25)
endif()
set(SP_LAYERS state net cluster txn session ops)
set(SP_USES_state "")
set(SP_USES_net state)
set(SP_USES_cluster net state)
set(SP_USES_txn cluster net state)
set(SP_USES_session txn cluster net state)
set(SP_USES_ops txn cluster net state)

function(sp_check_layers root)
  set(bad "")
  foreach(folder protocol config routing ${SP_LAYERS})
    if(folder IN_LIST SP_LAYERS)
      set(dir ${root}/server/${folder})
      set(allowed ${folder} ${SP_USES_${folder}})
    else()
      set(dir ${root}/${folder})
      set(allowed "")
    endif()
    file(GLOB_RECURSE files ${dir}/*.cpp ${dir}/*.hpp)
    foreach(f ${files})
      file(STRINGS ${f} includes REGEX "^#include \"server/")
      foreach(inc ${includes})
        string(REGEX REPLACE "^#include \"server/([a-z_]+)[/.].*" "\\1" used "${inc}")
        if(NOT used IN_LIST allowed)
          file(RELATIVE_PATH rel ${root} ${f})
          string(APPEND bad "\n  ${rel}: ${inc} (server/${folder} may use: ${SP_USES_${folder}})")
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(bad)
    message(FATAL_ERROR "includes against the layers of server/ (cmake/layers.cmake):${bad}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  sp_check_layers(${SP_ROOT})
endif()
