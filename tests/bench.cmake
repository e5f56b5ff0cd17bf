# bench.cmake - `tessera bench` (llama-bench-style throughput through the
# public API) and `tessera devices` (ts_devices_list; --json: ts_devices): output shape, JSON
# fields, argument errors. Tiny tests (-p 16 -n 4 -r 1): not measurements.
foreach(case json table devices devices_json devices_profile errors)
  add_test(NAME bench_cli_${case}
           COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_cli.py ${case}
                   $<TARGET_FILE:tessera> ${TS_MODELS_DIR})
  set_tests_properties(bench_cli_${case} PROPERTIES TIMEOUT 240)
endforeach()
# `tessera devices` opens and closes PoCL: LeakSanitizer's tracer then trips
# over a stale dynamic-TLS block the driver leaves behind (it crashes with
# "Tracer caught signal 11" before checking anything). Not scanning TLS as a
# root keeps the leak check (it can only report more, never fewer leaks).
if(TS_SANITIZE)
  set_tests_properties(bench_cli_devices bench_cli_devices_json bench_cli_devices_profile PROPERTIES ENVIRONMENT "LSAN_OPTIONS=use_tls=0")
endif()
