"""The build tools found on this host: compilers and CMake (toolchain), scikit-build-core's cmake and File API, the compile cache."""
