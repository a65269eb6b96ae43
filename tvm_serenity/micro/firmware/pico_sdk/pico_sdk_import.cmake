# Locates the Raspberry Pi Pico SDK for the generated tvm-serenity project and runs its
# initialisation script. The SDK is not bundled: point PICO_SDK_PATH (environment variable or
# -DPICO_SDK_PATH=...) at a checkout of the SDK, version 2.0 or later.
if(NOT PICO_SDK_PATH AND DEFINED ENV{PICO_SDK_PATH})
    set(PICO_SDK_PATH $ENV{PICO_SDK_PATH})
endif()
if(NOT PICO_SDK_PATH)
    message(FATAL_ERROR
        "PICO_SDK_PATH is not set: export PICO_SDK_PATH=/path/to/pico-sdk (2.0 or later)")
endif()
get_filename_component(PICO_SDK_PATH "${PICO_SDK_PATH}" REALPATH BASE_DIR "${CMAKE_BINARY_DIR}")
if(NOT EXISTS "${PICO_SDK_PATH}/pico_sdk_init.cmake")
    message(FATAL_ERROR "PICO_SDK_PATH=${PICO_SDK_PATH} holds no pico_sdk_init.cmake")
endif()
set(PICO_SDK_PATH "${PICO_SDK_PATH}" CACHE PATH "Raspberry Pi Pico SDK" FORCE)
include("${PICO_SDK_PATH}/pico_sdk_init.cmake")
