# The two-engine stream pipeline (src/pipe, seed 002): the scheduler and
# the cut's arithmetic on a synthetic trajectory (test_pipe.c), and the
# video family through the CLI (test_pipe_video.py: every cut bit-identical
# to one engine's run where both engines compute alike, one weight copy,
# the refusals).
ts_add_c_test(test_pipe ${CMAKE_CURRENT_LIST_DIR}/test_pipe.c)
set_tests_properties(test_pipe PROPERTIES TIMEOUT 120)
add_test(NAME test_pipe_video
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_pipe_video.py $<TARGET_FILE:tessera>
                 ${CMAKE_CURRENT_BINARY_DIR}/pipe_video)
set_tests_properties(test_pipe_video PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
