# System tests: the documented command sequences of README.md and the examples' READMEs, run as
# written (sizes shrunk) in a fresh directory.
add_test(NAME system_documented_commands
         COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/system/documented_commands.sh" $<TARGET_FILE:mmtrain>
                 "${PROJECT_SOURCE_DIR}")
set_tests_properties(system_documented_commands PROPERTIES TIMEOUT 900)
