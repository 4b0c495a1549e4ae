#include <gtest/gtest.h>
TEST(EmulatorSemantics, Placeholder) {}
