// Errors about the settings of a configuration. Their messages name settings as {name}, so that
// every front end shows them in its own words: what() as the names themselves ("batch_size"),
// the command line as its flags ("--batch-size", apps/cli/flag_names.h).
#pragma once

#include <cstddef>
#include <functional>
#include <sstream>
#include <string>

#include "core/error.h"

namespace alloy {

// `text` with each {name} replaced by spell(name) and each {{ by {.
std::string render_settings(const std::string& text,
                            const std::function<std::string(const std::string&)>& spell);

// The message with its settings as {name}, beside the exception that carries it.
class SettingsMessage {
 public:
  explicit SettingsMessage(std::string text) : text_(std::move(text)) {}
  virtual ~SettingsMessage() = default;
  const std::string& settings_text() const { return text_; }
  // The message with each setting spelt by `spell`.
  std::string render(const std::function<std::string(const std::string&)>& spell) const {
    return render_settings(text_, spell);
  }

 private:
  std::string text_;
};

// A bad value of a setting (exit status 2).
class SettingError : public UsageError, public SettingsMessage {
 public:
  explicit SettingError(const std::string& text);
};

// A failure that a setting's value leads to (exit status 1), such as a device that is not there.
class SettingFailure : public Error, public SettingsMessage {
 public:
  explicit SettingFailure(const std::string& text);
};

namespace detail {
// Writes a part of a settings message: literal text is the template itself, a string value
// (a user's word) has its braces doubled so that it is never read as a setting's name.
template <std::size_t N>
void put_settings_part(std::ostream& out, const char (&text)[N]) {
  out << text;
}
void put_settings_part(std::ostream& out, const std::string& value);
template <class Part>
void put_settings_part(std::ostream& out, const Part& part) {
  out << part;
}

template <class... Parts>
std::string settings_concat(const Parts&... parts) {
  std::ostringstream out;
  (put_settings_part(out, parts), ...);
  return out.str();
}
}  // namespace detail

// setting_fail("{batch_size} ", batch, " does not split into ", n, " micro-batches").
template <class... Parts>
[[noreturn]] void setting_fail(const Parts&... parts) {
  throw SettingError(detail::settings_concat(parts...));
}

template <class... Parts>
[[noreturn]] void setting_failure(const Parts&... parts) {
  throw SettingFailure(detail::settings_concat(parts...));
}

}  // namespace alloy
