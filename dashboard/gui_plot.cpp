#include "dashboard/gui_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace anelab::dashboard {
namespace {

struct Mapper {
  ImVec2 a, b;  // data rect
  double xlo, xhi, ylo, yhi;
  bool log_y;
  double ty(double y) const { return log_y ? std::log10(std::max(y, 1e-300)) : y; }
  float px(double x) const { return a.x + static_cast<float>((x - xlo) / (xhi - xlo) * (b.x - a.x)); }
  float py(double y) const {
    double l = ty(ylo), h = ty(yhi);
    return b.y - static_cast<float>((ty(y) - l) / (h - l) * (b.y - a.y));
  }
  double inv_x(float sx) const { return xlo + (sx - a.x) / (b.x - a.x) * (xhi - xlo); }
};

ImU32 text_col() { return ImGui::GetColorU32(ImGuiCol_Text); }
ImU32 dim_col() { return ImGui::GetColorU32(ImGuiCol_TextDisabled); }

void dashed_vline(ImDrawList* dl, float x, float y0, float y1, ImU32 c, float thick, bool dashed) {
  if (!dashed) {
    dl->AddLine(ImVec2(x, y0), ImVec2(x, y1), c, thick);
    return;
  }
  float seg = 4.0f * ImGui::GetIO().FontGlobalScale * (ImGui::GetFontSize() / 13.0f);
  for (float y = y0; y < y1; y += 2 * seg) dl->AddLine(ImVec2(x, y), ImVec2(x, std::min(y + seg, y1)), c, thick);
}

Range stack_range(const PlotStack& s, double xlo, double xhi) {
  Range r{0, 0};
  if (!s.x) return r;
  for (size_t i = 0; i < s.x->size(); ++i) {
    double xv = (*s.x)[i];
    if (!(xv >= xlo && xv <= xhi)) continue;
    double sum = 0;
    for (auto* y : s.ys)
      if (i < y->size() && std::isfinite((*y)[i])) sum += std::max(0.0, (*y)[i]);
    r.hi = std::max(r.hi, sum);
  }
  return r;
}

// Stacked areas, averaged per pixel column (buckets) so thousands of steps stay cheap.
void draw_stack(ImDrawList* dl, const PlotStack& s, const Mapper& m) {
  if (!s.x || s.ys.empty()) return;
  const int buckets = std::max(2, static_cast<int>((m.b.x - m.a.x) / 2));
  const size_t k = s.ys.size();
  std::vector<double> sum(static_cast<size_t>(buckets) * k, 0.0), bx(buckets, 0.0);
  std::vector<int> cnt(buckets, 0);
  for (size_t i = 0; i < s.x->size(); ++i) {
    double xv = (*s.x)[i];
    if (!(xv >= m.xlo && xv <= m.xhi)) continue;
    int b = std::clamp(static_cast<int>((xv - m.xlo) / (m.xhi - m.xlo) * buckets), 0, buckets - 1);
    bool ok = true;
    for (auto* y : s.ys) ok = ok && i < y->size() && std::isfinite((*y)[i]);
    if (!ok) continue;
    for (size_t j = 0; j < k; ++j) sum[b * k + j] += std::max(0.0, (*s.ys[j])[i]);
    bx[b] += xv, ++cnt[b];
  }
  std::vector<double> xs;
  std::vector<std::vector<double>> tops(k);
  for (int b = 0; b < buckets; ++b) {
    if (!cnt[b]) continue;
    xs.push_back(bx[b] / cnt[b]);
    double acc = 0;
    for (size_t j = 0; j < k; ++j) acc += sum[b * k + j] / cnt[b], tops[j].push_back(acc);
  }
  for (size_t i = 0; i + 1 < xs.size(); ++i) {
    float x0 = m.px(xs[i]), x1 = m.px(xs[i + 1]);
    for (size_t j = 0; j < k; ++j) {
      double lo0 = j ? tops[j - 1][i] : 0, lo1 = j ? tops[j - 1][i + 1] : 0;
      ImVec2 q[4] = {{x0, m.py(lo0)}, {x0, m.py(tops[j][i])}, {x1, m.py(tops[j][i + 1])}, {x1, m.py(lo1)}};
      dl->AddConvexPolyFilled(q, 4, s.colors[j]);
    }
  }
  if (xs.size() == 1) {  // a single bucket: draw bars
    for (size_t j = 0; j < k; ++j)
      dl->AddRectFilled({m.px(xs[0]) - 3, m.py(tops[j][0])}, {m.px(xs[0]) + 3, m.py(j ? tops[j - 1][0] : 0)},
                        s.colors[j]);
  }
}

void draw_axes(ImDrawList* dl, const Mapper& m, const PlotSpec& spec) {
  const ImU32 grid = ImGui::GetColorU32(ImGuiCol_Border, 0.45f);
  const float fs = ImGui::GetFontSize();
  auto yt = spec.log_y ? log_ticks(m.ylo, m.yhi, std::max(2, static_cast<int>((m.b.y - m.a.y) / (fs * 2.2f))))
                       : nice_ticks(m.ylo, m.yhi, std::max(2, static_cast<int>((m.b.y - m.a.y) / (fs * 2.2f))));
  for (double v : yt) {
    float y = m.py(v);
    dl->AddLine({m.a.x, y}, {m.b.x, y}, grid);
    std::string s = tick_label(v);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    dl->AddText({m.a.x - ts.x - fs * 0.3f, y - ts.y * 0.5f}, dim_col(), s.c_str());
  }
  int nx = std::max(3, static_cast<int>((m.b.x - m.a.x) / (fs * 3.5f)));
  for (double v : nice_ticks(m.xlo, m.xhi, nx)) {
    float x = m.px(v);
    dl->AddLine({x, m.a.y}, {x, m.b.y}, grid);
    std::string s = tick_label(v);
    ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    dl->AddText({x - ts.x * 0.5f, m.b.y + fs * 0.15f}, dim_col(), s.c_str());
  }
  dl->AddRect(m.a, m.b, ImGui::GetColorU32(ImGuiCol_Border));
}

void handle_input(const Mapper& m, XView& xv, bool hovered) {
  ImGuiIO& io = ImGui::GetIO();
  if (!hovered) return;
  if (io.MouseWheel != 0) {
    double at = m.inv_x(io.MousePos.x);
    double f = std::pow(0.85, io.MouseWheel);
    double lo = at - (at - m.xlo) * f, hi = at + (m.xhi - at) * f;
    if (hi - lo > 1e-9) xv.autofit = false, xv.lo = lo, xv.hi = hi;
  }
  if (ImGui::IsMouseDragging(ImGuiMouseButton_Left, 1.0f) && ImGui::IsItemActive()) {
    double dx = io.MouseDelta.x / (m.b.x - m.a.x) * (m.xhi - m.xlo);
    xv.autofit = false, xv.lo = m.xlo - dx, xv.hi = m.xhi - dx;
  }
  if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) xv.autofit = true;
}

void hover_readout(ImDrawList* dl, const Mapper& m, const PlotSpec& spec, const std::vector<PlotLine>& lines,
                   const std::vector<PlotMarker>& markers, const PlotStack* stack) {
  ImVec2 mp = ImGui::GetIO().MousePos;
  dl->AddLine({mp.x, m.a.y}, {mp.x, m.b.y}, ImGui::GetColorU32(ImGuiCol_Text, 0.5f));
  dl->AddLine({m.a.x, mp.y}, {m.b.x, mp.y}, ImGui::GetColorU32(ImGuiCol_Text, 0.25f));
  double at = m.inv_x(mp.x);
  ImGui::BeginTooltip();
  ImGui::Text("%s %s", spec.x_label, tick_label(at).c_str());
  char buf[64];
  for (const auto& l : lines) {
    if (l.label.empty() || !l.x || !l.y) continue;
    long i = nearest_index(*l.x, *l.y, at);
    if (i < 0) continue;
    std::snprintf(buf, sizeof buf, spec.y_fmt, (*l.y)[i]);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(l.color), "%s: %s  (%s %s)", l.label.c_str(), buf, spec.x_label,
                       tick_label((*l.x)[i]).c_str());
    dl->AddCircleFilled({m.px((*l.x)[i]), m.py((*l.y)[i])}, 3.5f, l.color);
  }
  if (stack && stack->x) {
    long i = stack->ys.empty() ? -1 : nearest_index(*stack->x, *stack->ys[0], at);
    for (size_t j = 0; i >= 0 && j < stack->ys.size(); ++j) {
      std::snprintf(buf, sizeof buf, spec.y_fmt, (*stack->ys[j])[i]);
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(stack->colors[j]), "%s: %s", stack->labels[j].c_str(), buf);
    }
  }
  const float near_px = ImGui::GetFontSize() * 0.4f;
  int shown = 0;
  for (const auto& mk : markers) {
    if (std::abs(m.px(mk.x) - mp.x) <= near_px && shown++ < 6)
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(mk.color), "| %s", mk.label.c_str());
  }
  ImGui::EndTooltip();
}
}  // namespace

ImU32 with_alpha(ImU32 c, float a) {
  ImVec4 v = ImGui::ColorConvertU32ToFloat4(c);
  v.w = a;
  return ImGui::ColorConvertFloat4ToU32(v);
}

ImU32 lighten(ImU32 c, float f) {
  ImVec4 v = ImGui::ColorConvertU32ToFloat4(c);
  v.x += (1 - v.x) * f, v.y += (1 - v.y) * f, v.z += (1 - v.z) * f;
  return ImGui::ColorConvertFloat4ToU32(v);
}

ImVec4 draw_plot(const PlotSpec& spec, XView& xv, const std::vector<PlotLine>& lines,
                 const std::vector<PlotMarker>& markers, const std::vector<LegendItem>& legend,
                 const PlotStack* stack) {
  ImVec2 size = spec.size;
  ImVec2 avail = ImGui::GetContentRegionAvail();
  if (size.x <= 0) size.x = avail.x;
  if (size.y <= 0) size.y = avail.y;
  size.x = std::max(size.x, 40.0f), size.y = std::max(size.y, 30.0f);
  const float fs = ImGui::GetFontSize();
  ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton(spec.id, size);
  const bool hovered = ImGui::IsItemHovered();
  ImDrawList* dl = ImGui::GetWindowDrawList();

  Mapper m;
  m.a = {p0.x + fs * 3.2f, p0.y + fs * 0.4f};
  m.b = {p0.x + size.x - fs * 0.5f, p0.y + size.y - fs * 1.3f};
  m.log_y = spec.log_y;
  m.xlo = xv.cur_lo(), m.xhi = xv.cur_hi();
  if (!(m.xhi > m.xlo)) m.xhi = m.xlo + 1;
  Range yr{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  for (const auto& l : lines) {
    if (!l.x || !l.y) continue;
    Range r = y_range(*l.x, *l.y, m.xlo, m.xhi, spec.log_y);
    if (r.valid()) yr.lo = std::min(yr.lo, r.lo), yr.hi = std::max(yr.hi, r.hi);
  }
  if (stack) {
    Range r = stack_range(*stack, m.xlo, m.xhi);
    if (r.hi > 0) yr.lo = std::min(yr.lo, 0.0), yr.hi = std::max(yr.hi, r.hi);
  }
  const bool empty = !(yr.hi >= yr.lo);
  if (!empty && spec.y_from_zero && !spec.log_y) yr.lo = std::min(yr.lo, 0.0);
  Range pr = pad_range(empty ? Range{0, 1} : yr, 0.06, spec.log_y);
  if (spec.y_from_zero && !spec.log_y && yr.lo >= 0) pr.lo = std::max(pr.lo, 0.0);
  m.ylo = pr.lo, m.yhi = pr.hi;

  dl->AddRectFilled(m.a, m.b, ImGui::GetColorU32(ImGuiCol_FrameBg, 0.35f));
  draw_axes(dl, m, spec);
  dl->PushClipRect(m.a, m.b, true);
  if (stack) draw_stack(dl, *stack, m);
  for (const auto& mk : markers)
    if (mk.x >= m.xlo && mk.x <= m.xhi) dashed_vline(dl, m.px(mk.x), m.a.y, m.b.y, mk.color, 1.0f, mk.dashed);
  const size_t buckets = static_cast<size_t>(std::max(8.0f, m.b.x - m.a.x));
  std::vector<ImVec2> pts;
  for (const auto& l : lines) {
    if (!l.x || !l.y) continue;
    auto d = decimate(*l.x, *l.y, m.xlo, m.xhi, buckets);
    pts.clear();
    for (auto& p : d) {
      if (spec.log_y && p.y <= 0) continue;
      pts.push_back({m.px(p.x), m.py(p.y)});
    }
    if (pts.size() >= 2) dl->AddPolyline(pts.data(), static_cast<int>(pts.size()), l.color, 0, l.thickness);
    if (l.points || pts.size() == 1)
      for (auto& p : pts) dl->AddCircleFilled(p, l.thickness + 1.0f, l.color);
  }
  dl->PopClipRect();
  if (empty) {
    ImVec2 ts = ImGui::CalcTextSize(spec.empty_text.c_str());
    dl->AddText({(m.a.x + m.b.x - ts.x) * 0.5f, (m.a.y + m.b.y - ts.y) * 0.5f}, dim_col(), spec.empty_text.c_str());
  }
  // Legend, top right.
  float ly = m.a.y + fs * 0.2f;
  for (const auto& it : legend) {
    ImVec2 ts = ImGui::CalcTextSize(it.label.c_str());
    float lx = m.b.x - ts.x - fs * 1.6f;
    dl->AddRectFilled({lx - fs * 0.2f, ly - 1}, {m.b.x - fs * 0.2f, ly + ts.y + 1},
                      ImGui::GetColorU32(ImGuiCol_WindowBg, 0.8f));
    dl->AddLine({lx, ly + ts.y * 0.5f}, {lx + fs * 0.9f, ly + ts.y * 0.5f}, it.color, 2.5f);
    dl->AddText({lx + fs * 1.1f, ly}, text_col(), it.label.c_str());
    ly += ts.y + 2;
  }
  handle_input(m, xv, hovered);
  if (hovered && !empty) hover_readout(dl, m, spec, lines, markers, stack);
  return {m.a.x, m.a.y, m.b.x, m.b.y};
}

}  // namespace anelab::dashboard
