// examples/common/plot.hpp: line charts (loss curves, approximation curves) as an SVG written
// directly (no dependency), and as a PNG through gnuplot when it is installed.
// Does not parse CSV files back: the programs pass the points they logged.
#pragma once

#include <attn/io/atomic_file.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace examples {

struct Curve {
  std::string name;
  std::string color;
  std::vector<double> x, y;
};

// A plain line chart with axes, ticks and a legend.
inline void write_svg(const std::filesystem::path& path, const std::string& title,
                      const std::string& xlabel, const std::string& ylabel,
                      const std::vector<Curve>& curves) {
  const double W = 720, H = 440, left = 70, right = 20, top = 40, bottom = 55;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Curve& c : curves)
    for (std::size_t i = 0; i < c.x.size(); ++i)
      if (std::isfinite(c.y[i])) {
        x0 = std::min(x0, c.x[i]), x1 = std::max(x1, c.x[i]);
        y0 = std::min(y0, c.y[i]), y1 = std::max(y1, c.y[i]);
      }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  const auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  const auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };
  std::string s;
  char buf[256];
  const auto add = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    s += buf;
  };
  add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      W, H);
  add("<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  s += "<text x=\"" + std::to_string(int(W / 2)) + "\" y=\"22\" text-anchor=\"middle\" " +
       "font-size=\"15\">" + title + "</text>\n";
  for (int i = 0; i <= 5; ++i) {  // ticks
    const double xv = x0 + (x1 - x0) * i / 5, yv = y0 + (y1 - y0) * i / 5;
    add("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left, py(yv),
        W - right, py(yv));
    add("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", left - 6, py(yv) + 4, yv);
    add("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.4g</text>\n", px(xv), H - bottom + 18,
        xv);
  }
  add("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      left, top, W - left - right, H - top - bottom);
  s += "<text x=\"" + std::to_string(int(W / 2)) + "\" y=\"" + std::to_string(int(H - 12)) +
       "\" text-anchor=\"middle\">" + xlabel + "</text>\n";
  s += "<text transform=\"translate(18," + std::to_string(int(H / 2)) +
       ") rotate(-90)\" text-anchor=\"middle\">" + ylabel + "</text>\n";
  for (std::size_t k = 0; k < curves.size(); ++k) {
    const Curve& c = curves[k];
    s += "<polyline fill=\"none\" stroke=\"" + c.color + "\" stroke-width=\"2\" points=\"";
    for (std::size_t i = 0; i < c.x.size(); ++i)
      if (std::isfinite(c.y[i])) add("%.1f,%.1f ", px(c.x[i]), py(c.y[i]));
    s += "\"/>\n";
    add("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"2\"/>\n",
        W - right - 150, top + 18 + 18.0 * double(k), W - right - 125, top + 18 + 18.0 * double(k),
        c.color.c_str());
    s += "<text x=\"" + std::to_string(int(W - right - 118)) + "\" y=\"" +
         std::to_string(int(top + 22 + 18 * double(k))) + "\">" + c.name + "</text>\n";
  }
  s += "</svg>\n";
  attn::io::write_file_atomically(path, s);
}

// Renders columns of a CSV file (header line first) with gnuplot into a PNG; returns false when
// gnuplot is not installed or fails (the SVG is the fallback).
inline bool gnuplot_png(const std::filesystem::path& csv, const std::filesystem::path& png,
                        const std::string& title,
                        const std::vector<std::pair<int, std::string>>& ys) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return false;
  std::string script = "set terminal png size 900,540; set output '" + png.string() +
                       "'; set datafile separator ','; set key autotitle columnhead; set title '" +
                       title + "'; set xlabel 'step'; set ylabel 'loss'; set grid; plot ";
  for (std::size_t i = 0; i < ys.size(); ++i)
    script += (i ? ", " : "") + std::string("'") + csv.string() +
              "' using 1:" + std::to_string(ys[i].first) + " with lines lw 2 title '" +
              ys[i].second + "'";
  const std::filesystem::path gp = png.string() + ".gp";
  attn::io::write_file_atomically(gp, script + "\n");
  const bool ok = std::system(("gnuplot '" + gp.string() + "' 2>/dev/null").c_str()) == 0;
  std::filesystem::remove(gp);
  return ok && std::filesystem::exists(png);
}

}  // namespace examples
