"""Building a recipe: recipes and options resolved into a plan, the llama.cpp source, toolchain kits, the CMake pipeline, install into staging, runtime floors, doctor."""
