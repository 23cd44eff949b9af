#include "core/setting_error.h"

namespace alloy {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

std::string as_names(const std::string& text) {
  return render_settings(text, [](const std::string& name) { return name; });
}

}  // namespace

std::string render_settings(const std::string& text,
                            const std::function<std::string(const std::string&)>& spell) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '{') {
      out += text[i];
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    while (end < text.size() && is_name_char(text[end]))
      ++end;
    if (end < text.size() && text[end] == '}' && end > i + 1) {
      out += spell(text.substr(i + 1, end - i - 1));
      i = end;
    } else {
      out += '{';  // not a setting's name: the text as written
    }
  }
  return out;
}

SettingError::SettingError(const std::string& text)
    : UsageError(as_names(text)), SettingsMessage(text) {}

SettingFailure::SettingFailure(const std::string& text)
    : Error(as_names(text)), SettingsMessage(text) {}

namespace detail {

void put_settings_part(std::ostream& out, const std::string& value) {
  for (char c : value) {
    out << c;
    if (c == '{') out << '{';
  }
}

}  // namespace detail

}  // namespace alloy
