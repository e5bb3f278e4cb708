# src/mem/: registration cache concurrency stress (also under
# ThreadSanitizer). Its unit tests are tests/unit/test_regcache*.c.
tw_add_test(test_regcache_stress ${CMAKE_SOURCE_DIR}/tests/regcache/test_regcache_stress.c
            TIMEOUT 60 LABELS tsan regcache)
# Registration and deregistration of one GPU range never overlap (issue 12).
tw_add_test(test_regcache_gpu_serial ${CMAKE_SOURCE_DIR}/tests/regcache/test_regcache_gpu_serial.c
            TIMEOUT 60 LABELS tsan regcache)
