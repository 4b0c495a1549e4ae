namespace anelab::rt { int runtime_library_anchor = 0; }
