#include <cstdio>
int main() {
  std::puts("sim: not built yet");
  return 0;
}
