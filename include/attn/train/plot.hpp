// attn/train/plot.hpp: the figures trainers draw: line charts (loss curves) and heatmaps
// (attention weights) as SVG written directly (no dependency), as PNG through gnuplot when it is
// installed (started from an argument vector, never through a shell: any path or title is safe),
// and heatmaps as shaded characters for the terminal. Every file is written atomically: a full
// disk leaves no empty or half-drawn PNG, and the call says it failed.
// Does not parse files back (callers pass the numbers they have) and does not pick colours for
// more than a handful of curves.
#pragma once

#include <unistd.h>
#include <attn/io/atomic_file.hpp>
#include <attn/train/process.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace attn::train::plot {

// An SVG document built by printf-style appends, opened with its size, font and white background.
class SvgText {
 public:
  SvgText(double width, double height, const char* font, int font_size) {
    add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
        "font-family=\"%s\" font-size=\"%d\">\n",
        width, height, font, font_size);
    s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  }
  template <class Arg, class... Args>
  void add(const char* fmt, Arg arg, Args... args) {
    char buf[320];
    std::snprintf(buf, sizeof buf, fmt, arg, args...);
    s += buf;
  }
  std::string s;
};

// &, <, >, " as XML entities, for labels inside SVG text.
inline std::string xml_escape(const std::string& in) {
  std::string out;
  for (const char c : in) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// gnuplot's single-quoted string syntax: ' doubles.
inline std::string gnuplot_quote(const std::string& in) {
  std::string out = "'";
  for (const char c : in) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// True when `path` holds a whole PNG: the signature first and the IEND chunk last. gnuplot exits
// 0 when a full disk cut its file short; such a file has no IEND at its end.
inline bool png_is_whole(const std::filesystem::path& path) {
  static constexpr unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static constexpr unsigned char iend[12] = {0,   0,   0,    0,    'I',  'E',
                                             'N', 'D', 0xae, 0x42, 0x60, 0x82};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  unsigned char head[8] = {}, tail[12] = {};
  const bool ok = std::fread(head, 1, 8, f) == 8 && std::fseek(f, -12, SEEK_END) == 0 &&
                  std::fread(tail, 1, 12, f) == 12;
  std::fclose(f);
  return ok && std::memcmp(head, signature, 8) == 0 && std::memcmp(tail, iend, 12) == 0;
}

// Runs gnuplot on `script` (written to a temp file beside `png`), which must draw into the
// placeholder path `output` (a temp file too); the PNG then replaces `png` atomically. Returns
// false, leaving `png` as it was, when gnuplot is missing or fails or draws nothing or a PNG cut
// short (a full disk).
inline bool run_gnuplot(const std::filesystem::path& png, const std::string& script_using_output,
                        const std::filesystem::path& output) {
  if (!program_available("gnuplot")) return false;
  const std::filesystem::path gp = png.string() + ".gp.tmp" + std::to_string(::getpid());
  std::error_code ec;
  bool ok = false;
  try {
    attn::io::write_file_atomically(gp, script_using_output);
    ok = run_program({"gnuplot", gp.string()}).ok() && png_is_whole(output);
    if (ok) std::filesystem::rename(output, png, ec);
    ok = ok && !ec;
  } catch (const attn::error&) {
    ok = false;  // the script could not be written: no PNG, the SVG stands
  }
  std::filesystem::remove(gp, ec);
  std::filesystem::remove(output, ec);
  return ok;
}

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
  SvgText svg(W, H, "sans-serif", 12);
  std::string& s = svg.s;
  const auto add = [&](const char* fmt, auto... args) { svg.add(fmt, args...); };
  s += "<text x=\"" + std::to_string(int(W / 2)) + "\" y=\"22\" text-anchor=\"middle\" " +
       "font-size=\"15\">" + xml_escape(title) + "</text>\n";
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
       "\" text-anchor=\"middle\">" + xml_escape(xlabel) + "</text>\n";
  s += "<text transform=\"translate(18," + std::to_string(int(H / 2)) +
       ") rotate(-90)\" text-anchor=\"middle\">" + xml_escape(ylabel) + "</text>\n";
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
         std::to_string(int(top + 22 + 18 * double(k))) + "\">" + xml_escape(c.name) + "</text>\n";
  }
  s += "</svg>\n";
  attn::io::write_file_atomically(path, s);
}

// Renders columns of a CSV file (header line first) with gnuplot into a PNG; returns false when
// gnuplot is not installed or fails (the SVG is the fallback).
inline bool gnuplot_png(const std::filesystem::path& csv, const std::filesystem::path& png,
                        const std::string& title,
                        const std::vector<std::pair<int, std::string>>& ys) {
  const std::filesystem::path output = png.string() + ".tmp" + std::to_string(::getpid());
  std::string script =
      "set terminal png noenhanced size 900,540; set output " + gnuplot_quote(output.string()) +
      "; set datafile separator ','; set key autotitle columnhead; set title " +
      gnuplot_quote(title) + "; set xlabel 'step'; set ylabel 'loss'; set grid; plot ";
  for (std::size_t i = 0; i < ys.size(); ++i)
    script += (i ? ", " : "") + gnuplot_quote(csv.string()) +
              " using 1:" + std::to_string(ys[i].first) + " with lines lw 2 title " +
              gnuplot_quote(ys[i].second);
  return run_gnuplot(png, script + "\n", output);
}

// ---- heatmaps
// ------------------------------------------------------------------------------------- A heatmap
// is a rows x cols matrix of values in [0, 1] (attention weights: one row per query), row-major,
// with one label per row and per column.

struct Heatmap {
  std::vector<double> values;  // [rows, cols], row-major
  std::size_t rows = 0, cols = 0;
  std::vector<std::string> row_labels, col_labels;

  double at(std::size_t r, std::size_t c) const { return values[r * cols + c]; }
};

// Shaded characters, two per cell (blank = 0, '@' = 1), row labels on the left and the column
// labels on top (their first two characters). Values outside [0, 1] are clamped.
inline std::string ascii_heatmap(const Heatmap& h) {
  static constexpr const char shades[] = " .:-=+*#%@";
  std::size_t width = 0;
  for (const std::string& l : h.row_labels) width = std::max(width, l.size());
  std::string s(width + 1, ' ');
  for (std::size_t c = 0; c < h.cols; ++c) {
    std::string l = c < h.col_labels.size() ? h.col_labels[c].substr(0, 2) : "";
    s += l + std::string(2 - l.size(), ' ');
  }
  s += '\n';
  for (std::size_t r = 0; r < h.rows; ++r) {
    const std::string l = r < h.row_labels.size() ? h.row_labels[r] : "";
    s += std::string(width - l.size(), ' ') + l + ' ';
    for (std::size_t c = 0; c < h.cols; ++c) {
      const double v = std::clamp(h.at(r, c), 0.0, 1.0);
      const char ch = shades[std::min<std::size_t>(9, std::size_t(std::lround(v * 9)))];
      s += ch;
      s += ch;
    }
    s += '\n';
  }
  return s;
}

// The heatmap as an SVG: white (0) to dark blue (1), the value printed in cells when they are few.
inline void write_heatmap_svg(const std::filesystem::path& path, const std::string& title,
                              const Heatmap& h) {
  const double cell = h.cols > 24 ? 16 : 28, left = 110, top = 80;
  const double W = left + cell * double(h.cols) + 20, H = top + cell * double(h.rows) + 20;
  SvgText svg(W, H, "monospace", 11);
  std::string& s = svg.s;
  const auto add = [&](const char* fmt, auto... args) { svg.add(fmt, args...); };
  s += "<text x=\"10\" y=\"20\" font-family=\"sans-serif\" font-size=\"14\">" + xml_escape(title) +
       "</text>\n";
  for (std::size_t c = 0; c < h.cols && c < h.col_labels.size(); ++c)
    s += "<text transform=\"translate(" + std::to_string(left + cell * (double(c) + 0.6)) + "," +
         std::to_string(top - 6) + ") rotate(-90)\">" + xml_escape(h.col_labels[c]) + "</text>\n";
  for (std::size_t r = 0; r < h.rows; ++r) {
    if (r < h.row_labels.size())
      s += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" +
           std::to_string(top + cell * (double(r) + 0.65)) + "\" text-anchor=\"end\">" +
           xml_escape(h.row_labels[r]) + "</text>\n";
    for (std::size_t c = 0; c < h.cols; ++c) {
      const double v = std::clamp(h.at(r, c), 0.0, 1.0);
      const int red = int(std::lround(255 - 225 * v)), green = int(std::lround(255 - 190 * v));
      add("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"rgb(%d,%d,255)\" "
          "stroke=\"#eee\"/>\n",
          left + cell * double(c), top + cell * double(r), cell, cell, red, green);
      if (h.cols <= 12)
        add("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%.2f</text>\n",
            left + cell * (double(c) + 0.5), top + cell * (double(r) + 0.62),
            v > 0.5 ? "white" : "black", h.at(r, c));
    }
  }
  s += "</svg>\n";
  attn::io::write_file_atomically(path, s);
}

// The heatmap as a PNG through gnuplot (`matrix with image`); returns false when gnuplot is not
// installed or fails (write_heatmap_svg is the fallback).
inline bool gnuplot_heatmap_png(const std::filesystem::path& png, const std::string& title,
                                const Heatmap& h) {
  if (!program_available("gnuplot")) return false;
  const std::filesystem::path data = png.string() + ".dat.tmp" + std::to_string(::getpid());
  std::string d;
  char buf[32];
  for (std::size_t r = 0; r < h.rows; ++r) {
    for (std::size_t c = 0; c < h.cols; ++c) {
      std::snprintf(buf, sizeof buf, "%s%.5f", c ? " " : "", h.at(r, c));
      d += buf;
    }
    d += '\n';
  }
  attn::io::write_file_atomically(data, d);
  const auto tics = [](const std::vector<std::string>& labels) {
    std::string t = "(";
    for (std::size_t i = 0; i < labels.size(); ++i)
      t += (i ? ", " : "") + gnuplot_quote(labels[i]) + " " + std::to_string(i);
    return t + ")";
  };
  const int width = int(std::max<std::size_t>(480, 160 + 22 * h.cols));
  const int height = int(std::max<std::size_t>(320, 140 + 22 * h.rows));
  const std::filesystem::path output = png.string() + ".tmp" + std::to_string(::getpid());
  std::string script = "set terminal png noenhanced size " + std::to_string(width) + "," +
                       std::to_string(height) + "; set output " + gnuplot_quote(output.string()) +
                       "; set title " + gnuplot_quote(title) +
                       "; set yrange [] reverse; set cbrange [0:1]; set palette defined "
                       "(0 'white', 1 '#1e41ff'); set xtics " +
                       tics(h.col_labels) + " rotate by 90 offset 0,0 scale 0; set ytics " +
                       tics(h.row_labels) + " scale 0; set size ratio -1; unset key; plot " +
                       gnuplot_quote(data.string()) + " matrix with image\n";
  const bool ok = run_gnuplot(png, script, output);
  std::error_code ec;
  std::filesystem::remove(data, ec);
  return ok;
}

// The heatmap as <stem>.png when gnuplot works, else <stem>.svg; returns the path written.
inline std::filesystem::path write_heatmap(const std::filesystem::path& stem,
                                           const std::string& title, const Heatmap& h) {
  const std::filesystem::path png = stem.string() + ".png", svg = stem.string() + ".svg";
  if (gnuplot_heatmap_png(png, title, h)) return png;
  write_heatmap_svg(svg, title, h);
  return svg;
}

}  // namespace attn::train::plot
