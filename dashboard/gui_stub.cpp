// Stand-in for builds without ImGui/GLFW/OpenGL.
#include "dashboard/gui.h"
#include "framework/core/error.h"

namespace anelab::dashboard {
bool gui_available() { return false; }
int run_dashboard(const GuiOptions&) {
  fail("dashboard",
       "built without ImGui/GLFW: apt-get install libimgui-dev libglfw3-dev (and libgl-dev), "
       "then re-run cmake and rebuild");
}
}  // namespace anelab::dashboard
