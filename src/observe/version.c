/*
 * uslab_version(): the version this library was built as, so that a program
 * can tell which libuslab.so.MAJOR it runs on (USLAB_VERSION is the one it
 * was compiled against). The numbers live in include/uslab.h only;
 * CMakeLists.txt and the Rust crates read them from there.
 */
#include "uslab.h"

int uslab_version(void)
{
	return USLAB_VERSION;
}
