// std::ios_base_library_init() (GCC 13, GLIBCXX_3.4.32) for a libstdc++ that predates it: the standard
// streams are set up by this library's own static ios_base::Init, as before GCC 13
#include <ios>
namespace std { void ios_base_library_init() { static ios_base::Init init; } }
