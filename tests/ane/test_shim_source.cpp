// Static contract of the Apple shim's source against the digest (§1.1-§1.6), for hosts that cannot
// compile it: the framework path, the class names, every private selector declared with the exact
// argument types in call order, the IOSurface property keys, and no use of ARC-only constructs.
#include <gtest/gtest.h>

#include "framework/core/file.h"

namespace anelab::test {
namespace {

std::string squash(const std::string& s) {  // collapse whitespace so line breaks do not matter
  std::string o;
  bool space = false;
  for (char c : s) {
    if (c == ' ' || c == '\n' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !o.empty()) o += ' ';
    space = false;
    o += c;
  }
  return o;
}

TEST(AppleShimSource, DeclaresTheDigestsSelectorsWithExactTypes) {
  const std::string src = squash(read_file_text(ANELAB_SOURCE_DIR "/framework/ane/shim_apple.mm"));
  for (const char* want : {
           "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine",
           "dlopen(kFrameworkPath, RTLD_NOW)",
           "NSClassFromString(@\"_ANEInMemoryModelDescriptor\")",
           "NSClassFromString(@\"_ANEInMemoryModel\")",
           "NSClassFromString(@\"_ANERequest\")",
           "NSClassFromString(@\"_ANEIOSurfaceObject\")",
           "NSClassFromString(@\"_ANEDeviceInfo\")",
           "- (id)modelWithMILText:(NSData*)milText weights:(NSDictionary*)weights optionsPlist:(id)options;",
           "- (id)inMemoryModelWithDescriptor:(id)descriptor;",
           "- (NSString*)hexStringIdentifier;",
           "- (BOOL)compileWithQoS:(unsigned int)qos options:(NSDictionary*)options error:(NSError**)error;",
           "- (BOOL)compiledModelExists;",  // reuse of a compiled program (maderix, ane-infer)
           "respondsToSelector:@selector(compiledModelExists)",
           "- (BOOL)loadWithQoS:(unsigned int)qos options:(NSDictionary*)options error:(NSError**)error;",
           "- (BOOL)evaluateWithQoS:(unsigned int)qos options:(NSDictionary*)options request:(id)request "
           "error:(NSError**)error;",
           "- (BOOL)unloadWithQoS:(unsigned int)qos error:(NSError**)error;",
           "- (id)objectWithIOSurface:(IOSurfaceRef)surface;",
           "- (id)requestWithInputs:(NSArray*)inputs inputIndices:(NSArray*)inputIndices outputs:(NSArray*)outputs "
           "outputIndices:(NSArray*)outputIndices weightsBuffer:(id)weightsBuffer perfStats:(id)perfStats "
           "procedureIndex:(NSNumber*)procedureIndex;",
           "- (id)aneSubType;",
           "NSClassFromString(@\"_ANEClient\")",
           "- (id)sharedConnection;",  // digest §1.8, `anelab probe`'s direct_eval section
           "- (BOOL)doEvaluateDirectWithModel:(id)model options:(NSDictionary*)options request:(id)request "
           "qos:(unsigned int)qos error:(NSError**)error;",
           "weightsBuffer:nil perfStats:nil",
           "modelWithMILText:text weights:dict optionsPlist:nil",
           "@\"offset\", data, @\"data\"",
           "(id)kIOSurfaceWidth",
           "(id)kIOSurfaceHeight",
           "(id)kIOSurfaceBytesPerElement",
           "(id)kIOSurfaceBytesPerRow",
           "(id)kIOSurfaceAllocSize",
           "(id)kIOSurfacePixelFormat",
           "IOSurfaceLock(it->second.ref, read_only ? kIOSurfaceLockReadOnly : 0, NULL)",
           "[e localizedDescription]",
           "[e domain]",
           "[e code]",
       })
    EXPECT_NE(src.find(squash(want)), std::string::npos) << "shim_apple.mm lacks: " << want;
  for (const char* banned : {"__bridge", "@autoreleasepool", "objc_msgSend"})
    EXPECT_EQ(src.find(banned), std::string::npos) << "shim_apple.mm uses " << banned;
}

}  // namespace
}  // namespace anelab::test
