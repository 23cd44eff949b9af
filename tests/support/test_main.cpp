// The one Boost.Test entry point each test executable links.
#define BOOST_TEST_MODULE alloy
#include <boost/test/unit_test.hpp>
