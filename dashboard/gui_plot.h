// A small line-plot widget drawn with ImDrawList (Debian's ImGui 1.86 has no ImPlot): axes with
// nice ticks, linear or log y, lines (min/max decimated to the pixel width), a stacked-area mode,
// vertical event markers, a legend, hover crosshair with a read-out, mouse-wheel zoom and drag-pan
// on the shared x axis (double-click resets).
#pragma once
#include <imgui.h>

#include <string>
#include <vector>

#include "dashboard/series.h"

namespace anelab::dashboard {

// The x view shared by all plots (linked zoom/pan).
struct XView {
  bool autofit = true;
  double lo = 0, hi = 1;          // used when !autofit
  double fit_lo = 0, fit_hi = 1;  // data range of this frame (set by the app)
  double cur_lo() const { return autofit ? fit_lo : lo; }
  double cur_hi() const { return autofit ? fit_hi : hi; }
};

struct PlotLine {
  const std::vector<double>* x = nullptr;
  const std::vector<double>* y = nullptr;
  ImU32 color = 0;
  float thickness = 1.5f;
  std::string label;    // shown in the hover read-out; empty = not shown
  bool points = false;  // draw small dots at the points (sparse series, e.g. validation)
};

struct PlotStack {  // stacked areas over one x (bottom to top)
  const std::vector<double>* x = nullptr;
  std::vector<const std::vector<double>*> ys;
  std::vector<ImU32> colors;
  std::vector<std::string> labels;
};

struct PlotMarker {
  double x = 0;
  ImU32 color = 0;
  std::string label;
  bool dashed = false;
};

struct LegendItem {
  std::string label;
  ImU32 color = 0;
};

struct PlotSpec {
  const char* id = "plot";
  ImVec2 size{0, 0};  // 0 = fill the available region
  bool log_y = false;
  bool y_from_zero = false;  // include 0 in the y range (linear only)
  const char* x_label = "step";
  const char* y_fmt = "%.4g";  // read-out format
  std::string empty_text = "no data yet";
};

// Draws the plot at the cursor and returns its data rectangle (inside the axes) in screen
// coordinates (min.x, min.y, max.x, max.y).
ImVec4 draw_plot(const PlotSpec& spec, XView& xv, const std::vector<PlotLine>& lines,
                 const std::vector<PlotMarker>& markers, const std::vector<LegendItem>& legend,
                 const PlotStack* stack = nullptr);

ImU32 with_alpha(ImU32 c, float a);
ImU32 lighten(ImU32 c, float f);

}  // namespace anelab::dashboard
