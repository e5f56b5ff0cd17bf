# server.cmake - the HTTP server behind `tessera serve` (src/server/*.c).
# It is a client of include/tessera.h only, like the CLI, and is linked into
# the CLI executables alone: libtessera keeps needing only libc, libm,
# pthreads and PCRE2. HTTP is libmicrohttpd's, JSON jansson's (Debian
# packages libmicrohttpd-dev, libjansson-dev; see docs/SERVER.md for why).
#
# -DTS_SERVER=OFF (the aarch64 cross build, where the arm64 -dev packages
# are not installed) builds the CLI with a `serve` that says it is absent.
option(TS_SERVER "Build the HTTP server behind `tessera serve` (libmicrohttpd, jansson)" ON)
if(NOT TS_SERVER)
  add_library(tessera_server_obj OBJECT ${CMAKE_SOURCE_DIR}/src/server/stub/serve_stub.c)
  target_include_directories(tessera_server_obj PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src/cli)
  target_link_libraries(tessera PRIVATE tessera_server_obj)
  target_link_libraries(tessera-shared-check PRIVATE tessera_server_obj)
  return()
endif()
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)

file(GLOB TS_SERVER_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.c)
add_library(tessera_server_obj OBJECT ${TS_SERVER_SOURCES})
# include/ for tessera.h, src/cli for serve.h (the CLI/server contract); not src/.
target_include_directories(tessera_server_obj PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src/cli)
target_compile_definitions(tessera_server_obj PRIVATE _GNU_SOURCE)
target_link_libraries(tessera_server_obj PUBLIC PkgConfig::MHD PkgConfig::JANSSON Threads::Threads)

# The CLI objects call tsrv_run, so both executables that link them need it.
target_link_libraries(tessera PRIVATE tessera_server_obj)
target_link_libraries(tessera-shared-check PRIVATE tessera_server_obj)
