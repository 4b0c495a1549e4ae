// Placeholder translation unit so the models library always has a source.
namespace anelab::models {
int models_library_anchor = 0;
}
