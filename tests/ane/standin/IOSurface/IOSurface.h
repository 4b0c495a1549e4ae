// Test-only stand-in for <IOSurface/IOSurface.h>: just the declarations framework/ane/shim_apple.mm
// uses, with Apple's signatures, so the shim can be syntax-checked on Linux (gobjc++ + GNUstep have
// no IOSurface and no CoreFoundation). Never linked; see tests/ane/shim_syntax_check.sh.
#pragma once
#include <stddef.h>
#include <stdint.h>

extern "C" {
typedef const void* CFTypeRef;
typedef const struct __CFString* CFStringRef;
typedef const struct __CFDictionary* CFDictionaryRef;
typedef struct __IOSurface* IOSurfaceRef;
typedef int kern_return_t;
typedef uint32_t IOSurfaceLockOptions;
enum { kIOSurfaceLockReadOnly = 0x00000001, kIOSurfaceLockAvoidSync = 0x00000002 };

extern const CFStringRef kIOSurfaceWidth;
extern const CFStringRef kIOSurfaceHeight;
extern const CFStringRef kIOSurfaceBytesPerElement;
extern const CFStringRef kIOSurfaceBytesPerRow;
extern const CFStringRef kIOSurfaceAllocSize;
extern const CFStringRef kIOSurfacePixelFormat;

IOSurfaceRef IOSurfaceCreate(CFDictionaryRef properties);
kern_return_t IOSurfaceLock(IOSurfaceRef buffer, IOSurfaceLockOptions options, uint32_t* seed);
kern_return_t IOSurfaceUnlock(IOSurfaceRef buffer, IOSurfaceLockOptions options, uint32_t* seed);
void* IOSurfaceGetBaseAddress(IOSurfaceRef buffer);
size_t IOSurfaceGetAllocSize(IOSurfaceRef buffer);
void CFRelease(CFTypeRef cf);
}
