// placeholder
namespace anelab::mil { int mil_library_anchor = 0; }
