# video_umt5.cmake - the umT5 text encoder of the Wan2.1 pipeline
# (src/video/umt5.c) against transformers, and its attention op.

# The relative-position attention: the scalar reference against a double
# formula, and the engine op (cpu, loop) against the reference, masks included.
ts_add_c_test(test_relattn ${CMAKE_CURRENT_SOURCE_DIR}/test_relattn.c)
