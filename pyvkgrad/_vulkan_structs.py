"""The Vulkan structures `_vulkan_info` passes to the loader, as ctypes classes.

64-bit layouts: every field in the spec's order with its C type, so that ctypes computes the
padding as the C ABI does (tests/test_vulkan_info.py checks offsets and sizes against
vulkan_core.h).
"""
from ctypes import (POINTER, Structure, c_char, c_char_p, c_float, c_int32, c_size_t,
                    c_uint8, c_uint32, c_uint64, c_void_p)

VkBool32 = c_uint32
VkDeviceSize = c_uint64


def _fields(ctype, names):
    return [(n.strip(), ctype) for n in names.split()]


class VkApplicationInfo(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p), ("pApplicationName", c_char_p),
                ("applicationVersion", c_uint32), ("pEngineName", c_char_p),
                ("engineVersion", c_uint32), ("apiVersion", c_uint32)]


class VkInstanceCreateInfo(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p), ("flags", c_uint32),
                ("pApplicationInfo", POINTER(VkApplicationInfo)),
                ("enabledLayerCount", c_uint32), ("ppEnabledLayerNames", POINTER(c_char_p)),
                ("enabledExtensionCount", c_uint32), ("ppEnabledExtensionNames", POINTER(c_char_p))]


class VkExtensionProperties(Structure):
    _fields_ = [("extensionName", c_char * 256), ("specVersion", c_uint32)]


# Every field of VkPhysicalDeviceLimits, in spec order, so the layout is exact.
class VkPhysicalDeviceLimits(Structure):
    _fields_ = (
        _fields(c_uint32, """maxImageDimension1D maxImageDimension2D maxImageDimension3D
            maxImageDimensionCube maxImageArrayLayers maxTexelBufferElements
            maxUniformBufferRange maxStorageBufferRange maxPushConstantsSize
            maxMemoryAllocationCount maxSamplerAllocationCount""")
        + _fields(VkDeviceSize, "bufferImageGranularity sparseAddressSpaceSize")
        + _fields(c_uint32, """maxBoundDescriptorSets maxPerStageDescriptorSamplers
            maxPerStageDescriptorUniformBuffers maxPerStageDescriptorStorageBuffers
            maxPerStageDescriptorSampledImages maxPerStageDescriptorStorageImages
            maxPerStageDescriptorInputAttachments maxPerStageResources
            maxDescriptorSetSamplers maxDescriptorSetUniformBuffers
            maxDescriptorSetUniformBuffersDynamic maxDescriptorSetStorageBuffers
            maxDescriptorSetStorageBuffersDynamic maxDescriptorSetSampledImages
            maxDescriptorSetStorageImages maxDescriptorSetInputAttachments
            maxVertexInputAttributes maxVertexInputBindings maxVertexInputAttributeOffset
            maxVertexInputBindingStride maxVertexOutputComponents
            maxTessellationGenerationLevel maxTessellationPatchSize
            maxTessellationControlPerVertexInputComponents
            maxTessellationControlPerVertexOutputComponents
            maxTessellationControlPerPatchOutputComponents
            maxTessellationControlTotalOutputComponents
            maxTessellationEvaluationInputComponents maxTessellationEvaluationOutputComponents
            maxGeometryShaderInvocations maxGeometryInputComponents maxGeometryOutputComponents
            maxGeometryOutputVertices maxGeometryTotalOutputComponents
            maxFragmentInputComponents maxFragmentOutputAttachments
            maxFragmentDualSrcAttachments maxFragmentCombinedOutputResources
            maxComputeSharedMemorySize""")
        + [("maxComputeWorkGroupCount", c_uint32 * 3), ("maxComputeWorkGroupInvocations", c_uint32),
           ("maxComputeWorkGroupSize", c_uint32 * 3)]
        + _fields(c_uint32, """subPixelPrecisionBits subTexelPrecisionBits mipmapPrecisionBits
            maxDrawIndexedIndexValue maxDrawIndirectCount""")
        + _fields(c_float, "maxSamplerLodBias maxSamplerAnisotropy")
        + [("maxViewports", c_uint32), ("maxViewportDimensions", c_uint32 * 2),
           ("viewportBoundsRange", c_float * 2), ("viewportSubPixelBits", c_uint32),
           ("minMemoryMapAlignment", c_size_t)]
        + _fields(VkDeviceSize, """minTexelBufferOffsetAlignment minUniformBufferOffsetAlignment
            minStorageBufferOffsetAlignment""")
        + [("minTexelOffset", c_int32), ("maxTexelOffset", c_uint32),
           ("minTexelGatherOffset", c_int32), ("maxTexelGatherOffset", c_uint32),
           ("minInterpolationOffset", c_float), ("maxInterpolationOffset", c_float)]
        + _fields(c_uint32, """subPixelInterpolationOffsetBits maxFramebufferWidth
            maxFramebufferHeight maxFramebufferLayers framebufferColorSampleCounts
            framebufferDepthSampleCounts framebufferStencilSampleCounts
            framebufferNoAttachmentsSampleCounts maxColorAttachments
            sampledImageColorSampleCounts sampledImageIntegerSampleCounts
            sampledImageDepthSampleCounts sampledImageStencilSampleCounts
            storageImageSampleCounts maxSampleMaskWords timestampComputeAndGraphics""")
        + [("timestampPeriod", c_float)]
        + _fields(c_uint32, """maxClipDistances maxCullDistances
            maxCombinedClipAndCullDistances discreteQueuePriorities""")
        + [("pointSizeRange", c_float * 2), ("lineWidthRange", c_float * 2),
           ("pointSizeGranularity", c_float), ("lineWidthGranularity", c_float),
           ("strictLines", VkBool32), ("standardSampleLocations", VkBool32)]
        + _fields(VkDeviceSize, """optimalBufferCopyOffsetAlignment
            optimalBufferCopyRowPitchAlignment nonCoherentAtomSize""")
    )


class VkPhysicalDeviceSparseProperties(Structure):
    _fields_ = _fields(VkBool32, """residencyStandard2DBlockShape
        residencyStandard2DMultisampleBlockShape residencyStandard3DBlockShape
        residencyAlignedMipSize residencyNonResidentStrict""")


class VkPhysicalDeviceProperties(Structure):
    _fields_ = [("apiVersion", c_uint32), ("driverVersion", c_uint32), ("vendorID", c_uint32),
                ("deviceID", c_uint32), ("deviceType", c_uint32), ("deviceName", c_char * 256),
                ("pipelineCacheUUID", c_uint8 * 16), ("limits", VkPhysicalDeviceLimits),
                ("sparseProperties", VkPhysicalDeviceSparseProperties)]


class VkPhysicalDeviceProperties2(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p), ("properties", VkPhysicalDeviceProperties)]


class VkPhysicalDeviceSubgroupProperties(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p), ("subgroupSize", c_uint32),
                ("supportedStages", c_uint32), ("supportedOperations", c_uint32),
                ("quadOperationsInAllStages", VkBool32)]


class VkPhysicalDeviceDriverProperties(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p), ("driverID", c_uint32),
                ("driverName", c_char * 256), ("driverInfo", c_char * 256),
                ("conformanceVersion", c_uint8 * 4)]


class VkPhysicalDeviceFloatControlsProperties(Structure):  # Vulkan 1.2
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p), ("denormBehaviorIndependence", c_uint32),
                ("roundingModeIndependence", c_uint32)] + _fields(VkBool32, """
        shaderSignedZeroInfNanPreserveFloat16 shaderSignedZeroInfNanPreserveFloat32
        shaderSignedZeroInfNanPreserveFloat64 shaderDenormPreserveFloat16
        shaderDenormPreserveFloat32 shaderDenormPreserveFloat64 shaderDenormFlushToZeroFloat16
        shaderDenormFlushToZeroFloat32 shaderDenormFlushToZeroFloat64
        shaderRoundingModeRTEFloat16 shaderRoundingModeRTEFloat32 shaderRoundingModeRTEFloat64
        shaderRoundingModeRTZFloat16 shaderRoundingModeRTZFloat32 shaderRoundingModeRTZFloat64""")


class VkPhysicalDeviceFeatures(Structure):
    _fields_ = _fields(VkBool32, """robustBufferAccess fullDrawIndexUint32 imageCubeArray
        independentBlend geometryShader tessellationShader sampleRateShading dualSrcBlend
        logicOp multiDrawIndirect drawIndirectFirstInstance depthClamp depthBiasClamp
        fillModeNonSolid depthBounds wideLines largePoints alphaToOne multiViewport
        samplerAnisotropy textureCompressionETC2 textureCompressionASTC_LDR
        textureCompressionBC occlusionQueryPrecise pipelineStatisticsQuery
        vertexPipelineStoresAndAtomics fragmentStoresAndAtomics
        shaderTessellationAndGeometryPointSize shaderImageGatherExtended
        shaderStorageImageExtendedFormats shaderStorageImageMultisample
        shaderStorageImageReadWithoutFormat shaderStorageImageWriteWithoutFormat
        shaderUniformBufferArrayDynamicIndexing shaderSampledImageArrayDynamicIndexing
        shaderStorageBufferArrayDynamicIndexing shaderStorageImageArrayDynamicIndexing
        shaderClipDistance shaderCullDistance shaderFloat64 shaderInt64 shaderInt16
        shaderResourceResidency shaderResourceMinLod sparseBinding sparseResidencyBuffer
        sparseResidencyImage2D sparseResidencyImage3D sparseResidency2Samples
        sparseResidency4Samples sparseResidency8Samples sparseResidency16Samples
        sparseResidencyAliased variableMultisampleRate inheritedQueries""")


class VkPhysicalDeviceFeatures2(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p), ("features", VkPhysicalDeviceFeatures)]


class VkPhysicalDeviceShaderFloat16Int8Features(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p)] + _fields(VkBool32, """
        shaderFloat16 shaderInt8""")


class VkPhysicalDeviceShaderAtomicFloatFeaturesEXT(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p)] + _fields(VkBool32, """
        shaderBufferFloat32Atomics shaderBufferFloat32AtomicAdd shaderBufferFloat64Atomics
        shaderBufferFloat64AtomicAdd shaderSharedFloat32Atomics shaderSharedFloat32AtomicAdd
        shaderSharedFloat64Atomics shaderSharedFloat64AtomicAdd shaderImageFloat32Atomics
        shaderImageFloat32AtomicAdd sparseImageFloat32Atomics sparseImageFloat32AtomicAdd""")


class VkMemoryType(Structure):
    _fields_ = [("propertyFlags", c_uint32), ("heapIndex", c_uint32)]


class VkMemoryHeap(Structure):
    _fields_ = [("size", VkDeviceSize), ("flags", c_uint32)]


class VkPhysicalDeviceMemoryProperties2(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p),
                ("memoryTypeCount", c_uint32), ("memoryTypes", VkMemoryType * 32),
                ("memoryHeapCount", c_uint32), ("memoryHeaps", VkMemoryHeap * 16)]


class VkPhysicalDeviceMemoryBudgetPropertiesEXT(Structure):
    _fields_ = [("sType", c_uint32), ("pNext", c_void_p),
                ("heapBudget", VkDeviceSize * 16), ("heapUsage", VkDeviceSize * 16)]
