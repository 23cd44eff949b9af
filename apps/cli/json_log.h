// The --log-json writer: one JSON object per line, flushed as it is written so a reader can
// follow a run while it trains.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace alloy::app {

// One JSON object built key by key, in insertion order.
class JsonObject {
 public:
  JsonObject& add(const std::string& key, const std::string& value);
  JsonObject& add(const std::string& key, const char* value);
  JsonObject& add(const std::string& key, double value);  // non-finite values become null
  JsonObject& add(const std::string& key, float value);   // 0.1f as 0.1; non-finite: null
  JsonObject& add(const std::string& key, std::int64_t value);
  JsonObject& add(const std::string& key, int value);
  JsonObject& add(const std::string& key, bool value);
  JsonObject& add(const std::string& key, const std::vector<std::string>& values);  // strings

  // The object as one line of text, without a newline.
  std::string str() const { return body_ + '}'; }

 private:
  void key(const std::string& name);

  std::string body_ = "{";
};

// Escapes and quotes `text` as a JSON string (control characters as \u00XX).
std::string json_quote(const std::string& text);
// The shortest decimal that reads back as the same double; null when not finite.
std::string json_number(double value);

// Writes objects to a file, or to standard output when the path is "-". Failures to open or
// write are alloy::Errors naming the path.
class JsonLog {
 public:
  // `append`: add to the file instead of starting it anew (a restarted worker's log).
  explicit JsonLog(const std::string& path, bool append = false);
  JsonLog(const JsonLog&) = delete;
  JsonLog& operator=(const JsonLog&) = delete;

  void write(const JsonObject& object);
  bool to_stdout() const { return path_ == "-"; }

 private:
  std::string path_;
  std::ofstream file_;
};

}  // namespace alloy::app
