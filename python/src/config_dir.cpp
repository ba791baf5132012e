// python/src/config_dir.cpp: the source tree's configs directory for the Python module, searched after
// $MAXTEXT_CONFIG_DIR and the directories given to _set_config_dirs. The absolute path is compiled into this unit
// alone (python/CMakeLists.txt), so that module.cpp compiles the same text in every checkout.
namespace maxtext::python {

const char* maxtext_python_config_dir() { return MAXTEXT_PYTHON_CONFIG_DIR; }

}  // namespace maxtext::python
