// Screenshots: the rendered back buffer as PNG (stb_image_write from Debian's libstb) plus a JSON
// sidecar (same path, .json) with the panel and plot rectangles in pixels, the runs and their
// errors -- so tests can check pixels inside known regions and scripts can see what was shown.
#include <GLFW/glfw3.h>
#include <stb_image_write.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "dashboard/gui_internal.h"
#include "framework/core/error.h"
#include "framework/core/file.h"

namespace anelab::dashboard {
namespace {
nlohmann::json rect_json(const Rect& r) {
  return {std::lround(r.x), std::lround(r.y), std::lround(r.w), std::lround(r.h)};
}

nlohmann::json sidecar(const App& app, const std::string& png, int w, int h, int frames) {
  using nlohmann::json;
  json j;
  j["png"] = png;
  j["width"] = w, j["height"] = h, j["frames"] = frames, j["scale"] = app.scale;
  j["x_axis"] = app.x_time ? "time" : "step";
  json panels = json::object(), plots = json::object();
  for (const auto& [k, r] : app.panels) panels[k] = rect_json(r);
  for (const auto& [k, r] : app.plots) plots[k] = rect_json(r);
  j["panels"] = panels, j["plots"] = plots;
  json runs = json::array(), errors = json::array();
  for (const auto& v : app.runs) {
    const RunData& r = *v.data;
    ImVec4 c = ImGui::ColorConvertU32ToFloat4(v.color);
    json jr = {{"dir", r.dir},
               {"name", r.name},
               {"status", status_name(r.status)},
               {"color", {std::lround(c.x * 255), std::lround(c.y * 255), std::lround(c.z * 255)}},
               {"visible", v.visible},
               {"steps", r.steps.size()},
               {"evals", r.evals.size()},
               {"samples", r.samples.size()},
               {"events", r.events},
               {"malformed", r.malformed},
               {"markers", r.markers.size()},
               {"starts", r.starts},
               {"restarts", r.restarts},
               {"polls_with_data", r.polls_with_data},
               {"resets", r.follower().resets()},
               {"bytes_read", r.follower().offset()},
               {"file_exists", r.file_exists}};
    jr["power"] = r.power_state == PowerState::available ? json{{"state", "available"}, {"source", r.power_source}}
                  : r.power_state == PowerState::not_available
                      ? json{{"state", "not_available"}, {"reason", r.power_reason}}
                      : json{{"state", "unknown"}};
    jr["first_error"] =
        r.first_error.line ? json{{"line", r.first_error.line}, {"message", r.first_error.message}} : json(nullptr);
    if (r.first_error.line)
      errors.push_back(r.name + ": " + std::to_string(r.malformed) + " malformed line(s) in " + r.events_path +
                       "; first: line " + std::to_string(r.first_error.line) + ": " + r.first_error.message);
    if (!r.io_error.empty()) errors.push_back(r.name + ": " + r.events_path + ": " + r.io_error);
    if (!r.fatal_error.empty()) errors.push_back(r.name + ": run failed: " + r.fatal_error);
    runs.push_back(jr);
  }
  j["runs"] = runs, j["errors"] = errors;
  const power::Meter& m = *app.meter;
  if (m.available()) {
    json rails = json::array();
    for (power::Rail r : m.rails()) rails.push_back(power::rail_name(r));
    j["power"] = {{"available", true},
                  {"source", m.source_name()},
                  {"rails", rails},
                  {"watts", std::isnan(app.power_now_w) ? json(nullptr) : json(app.power_now_w)}};
    if (!app.meter_error.empty()) j["power"]["error"] = app.meter_error;
  } else {
    j["power"] = {{"available", false}, {"reason", m.reason()}};
  }
  return j;
}
}  // namespace

void write_screenshot(App& app, const std::string& png_path, int frames_rendered) {
  int w = 0, h = 0;
  glfwGetFramebufferSize(app.window, &w, &h);
  if (w <= 0 || h <= 0) fail("dashboard", "cannot take a screenshot: framebuffer is ", w, "x", h);
  std::vector<unsigned char> px(static_cast<size_t>(w) * h * 3), flipped(px.size());
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGB, GL_UNSIGNED_BYTE, px.data());
  const size_t row = static_cast<size_t>(w) * 3;
  for (int y = 0; y < h; ++y) std::copy_n(&px[(h - 1 - y) * row], row, &flipped[y * row]);
  std::filesystem::path p(png_path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  stbi_write_png_compression_level = 9;
  if (!stbi_write_png(png_path.c_str(), w, h, 3, flipped.data(), static_cast<int>(row)))
    fail("dashboard", "cannot write screenshot ", png_path, " (check the directory exists and is writable)");
  std::filesystem::path side = p;
  side.replace_extension(".json");
  write_file_atomic(side.string(), sidecar(app, png_path, w, h, frames_rendered).dump(2) + "\n");
  std::fprintf(stderr, "anelab dashboard: wrote %s (%dx%d) and %s\n", png_path.c_str(), w, h, side.c_str());
}

}  // namespace anelab::dashboard
