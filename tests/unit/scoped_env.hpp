#pragma once
// One environment variable set (or unset) for the scope of a test, then restored.
#include <cstdlib>
#include <string>

namespace halox_test {

// Sets one variable for the scope of a test and restores what was there.
class scoped_env {
public:
  scoped_env(char const* name, char const* value) : name_(name) {
    if (char const* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~scoped_env() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  scoped_env(scoped_env const&) = delete;
  scoped_env& operator=(scoped_env const&) = delete;

private:
  std::string name_, old_;
  bool had_ = false;
};

} // namespace halox_test
