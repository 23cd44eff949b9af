#include "apps/cli/json_log.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "core/error.h"

namespace alloy::app {

std::string json_quote(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;  // UTF-8 passes through unchanged
        }
    }
  }
  out += '"';
  return out;
}

namespace {

// The shortest text that reads back as `value` (a float's own, not its widened double's).
template <class Number>
std::string shortest_number(Number value) {
  if (!std::isfinite(value)) return "null";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

}  // namespace

std::string json_number(double value) {
  return shortest_number(value);
}

void JsonObject::key(const std::string& name) {
  if (body_.size() > 1) body_ += ',';
  body_ += json_quote(name);
  body_ += ':';
}

JsonObject& JsonObject::add(const std::string& name, const std::string& value) {
  key(name);
  body_ += json_quote(value);
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, const char* value) {
  return add(name, std::string(value));
}

JsonObject& JsonObject::add(const std::string& name, double value) {
  key(name);
  body_ += json_number(value);
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, float value) {
  key(name);
  body_ += shortest_number(value);
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, std::int64_t value) {
  key(name);
  body_ += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, int value) {
  return add(name, static_cast<std::int64_t>(value));
}

JsonObject& JsonObject::add(const std::string& name, bool value) {
  key(name);
  body_ += value ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::add(const std::string& name, const std::vector<std::string>& values) {
  key(name);
  body_ += '[';
  for (std::size_t i = 0; i < values.size(); ++i)
    body_ += (i ? "," : "") + json_quote(values[i]);
  body_ += ']';
  return *this;
}

JsonLog::JsonLog(const std::string& path, bool append) : path_(path) {
  if (to_stdout()) return;
  file_.open(path, std::ios::out | (append ? std::ios::app : std::ios::trunc));
  if (!file_) fail("cannot open the JSON log ", path, ": ", std::strerror(errno));
}

void JsonLog::write(const JsonObject& object) {
  std::ostream& out = to_stdout() ? std::cout : file_;
  out << object.str() << '\n';
  out.flush();
  if (!out) fail("cannot write the JSON log ", to_stdout() ? "to standard output" : path_);
}

}  // namespace alloy::app
