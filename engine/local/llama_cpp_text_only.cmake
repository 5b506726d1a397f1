# Included by CMake at the end of every project() call of the llama-cpp-python build
# (CMAKE_PROJECT_INCLUDE, set by engine/local/install.py). llama-cpp-python forces llama.cpp's `common`
# library on (argument parsing, chat parsers, an HTTP downloader with cpp-httplib: about half of the
# compile), yet its wheel neither ships nor loads it: the bindings load libllama and libggml only.
# Turning it off here, inside llama.cpp's own project() and before its option() reads the value, skips
# that compile and its install rule.
if(PROJECT_NAME STREQUAL "llama.cpp")
    set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library (off: llama-cpp-python does not load it)" FORCE)
endif()
