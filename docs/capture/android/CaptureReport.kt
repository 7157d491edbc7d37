// Writes an npu-audit device report (docs/device-reports.md) from an Android app: the outputs the
// model gave on the phone's NPU, the inputs it was fed, and what the phone says it is. Written
// against ONNX Runtime's Android package (com.microsoft.onnxruntime:onnxruntime-android-qnn, the
// ai.onnxruntime Java API, 1.20 or later). Float32 inputs and outputs; extend `npy` for others.
//
// Usage (e.g. from a debug screen):
//   val dir = CaptureReport.capture(context, modelBytes, listOf(mapOf("x" to (floats to longArrayOf(1, 3, 48, 192)))))
// then collect it with docs/capture/android/collect.sh.

package com.example.npuaudit

import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import ai.onnxruntime.TensorInfo
import android.content.Context
import android.os.Build
import org.json.JSONObject
import java.io.ByteArrayOutputStream
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.FloatBuffer
import java.security.MessageDigest
import java.util.zip.ZipEntry
import java.util.zip.ZipOutputStream

object CaptureReport {
    /** One input set: input name -> (values, shape). */
    typealias Sample = Map<String, Pair<FloatArray, LongArray>>

    /** QNN options as npu-audit's `qnn:<chipset>` targets pass them; htp_arch/soc_model from its table. */
    private fun qnnOptions(htpArch: Int?, socModel: Int?): Map<String, String> = buildMap {
        put("backend_path", "libQnnHtp.so")
        htpArch?.let { put("htp_arch", it.toString()) }
        socModel?.let { put("soc_model", it.toString()) }
    }

    /** Runs every sample and writes `<filesDir>/npu-audit-report/` whole: device.json, outputs.npz, inputs.npz. */
    fun capture(context: Context, model: ByteArray, samples: List<Sample>, htpArch: Int? = null, socModel: Int? = null): File {
        val env = OrtEnvironment.getEnvironment()
        val qnn = qnnOptions(htpArch, socModel)
        val options = OrtSession.SessionOptions().apply {
            setIntraOpNumThreads(1)
            setOptimizationLevel(OrtSession.SessionOptions.OptLevel.ALL_OPT)
            addQnn(qnn)
        }
        val outputs = LinkedHashMap<String, MutableList<Pair<FloatArray, LongArray>>>()
        env.createSession(model, options).use { session ->
            for (sample in samples) {
                val feeds = sample.mapValues { (_, v) -> OnnxTensor.createTensor(env, FloatBuffer.wrap(v.first), v.second) }
                try {
                    session.run(feeds).use { result ->
                        for ((name, value) in result) {
                            val t = value as OnnxTensor
                            val buf = t.floatBuffer
                            val data = FloatArray(buf.remaining()).also { buf.get(it) }
                            outputs.getOrPut(name) { mutableListOf() }.add(data to (t.info as TensorInfo).shape)
                        }
                    }
                } finally {
                    feeds.values.forEach { it.close() }
                }
            }
        }
        val inputs = LinkedHashMap<String, MutableList<Pair<FloatArray, LongArray>>>()
        samples.forEach { s -> s.forEach { (n, v) -> inputs.getOrPut(n) { mutableListOf() }.add(v) } }
        val device = JSONObject().apply {
            put("manufacturer", Build.MANUFACTURER)
            put("device_model", Build.MODEL)
            if (Build.VERSION.SDK_INT >= 31) put("soc_model", Build.SOC_MODEL)
            // board_platform (ro.board.platform) is not in android.os.Build: collect.sh adds it.
            put("os", "Android ${Build.VERSION.RELEASE} (API ${Build.VERSION.SDK_INT})")
            put("app_version", context.packageManager.getPackageInfo(context.packageName, 0).versionName ?: "")
            put("ep", "QNNExecutionProvider")
            put("ep_options", JSONObject(qnn - "backend_path"))
            put("model_sha256", MessageDigest.getInstance("SHA-256").digest(model).joinToString("") { "%02x".format(it) })
            // Add "onnxruntime_version" and "qnn_release" from your build.gradle dependencies.
        }
        val tmp = File(context.filesDir, "npu-audit-report.tmp").apply { deleteRecursively(); mkdirs() }
        File(tmp, "device.json").writeText(device.toString(2))
        File(tmp, "outputs.npz").writeBytes(npz(outputs))
        File(tmp, "inputs.npz").writeBytes(npz(inputs))
        val out = File(context.filesDir, "npu-audit-report")
        out.deleteRecursively()
        check(tmp.renameTo(out)) { "cannot move the report into place" }
        return out
    }

    /** `.npz`: one `<name>.npy` per array, the samples stacked on a new leading axis. */
    private fun npz(arrays: Map<String, List<Pair<FloatArray, LongArray>>>): ByteArray {
        val bytes = ByteArrayOutputStream()
        ZipOutputStream(bytes).use { zip ->
            for ((name, samples) in arrays) {
                zip.putNextEntry(ZipEntry("$name.npy"))
                zip.write(npy(samples))
                zip.closeEntry()
            }
        }
        return bytes.toByteArray()
    }

    /** NumPy's `.npy` v1.0: magic, header length, a Python dict literal padded to 64 bytes, data. */
    private fun npy(samples: List<Pair<FloatArray, LongArray>>): ByteArray {
        val shape = listOf(samples.size.toLong()) + samples.first().second.toList()
        val dims = if (shape.size == 1) "${shape[0]}," else shape.joinToString(", ")
        var header = "{'descr': '<f4', 'fortran_order': False, 'shape': ($dims), }"
        val unpadded = 10 + header.length + 1
        header += " ".repeat((64 - unpadded % 64) % 64) + "\n"
        val count = samples.sumOf { it.first.size }
        val buf = ByteBuffer.allocate(10 + header.length + 4 * count).order(ByteOrder.LITTLE_ENDIAN)
        buf.put(byteArrayOf(0x93.toByte(), 'N'.code.toByte(), 'U'.code.toByte(), 'M'.code.toByte(), 'P'.code.toByte(), 'Y'.code.toByte(), 1, 0))
        buf.putShort(header.length.toShort())
        buf.put(header.toByteArray(Charsets.US_ASCII))
        samples.forEach { s -> s.first.forEach { buf.putFloat(it) } }
        return buf.array()
    }
}
